"""The backbone interface: what the generation loop runs on, and the checks every
implementation shares.

Two implementations: river_cpp.engine.compute.graph_backbone (river-cpp's own graph, with the
river and its exits) and river_cpp.engine.compute.llama_backbone (llama.cpp's own context, for
every architecture llama.cpp runs; no river). river_cpp.RiverModel is a facade over one
of them and satisfies the same protocol, so the decoding floor's plain and speculative
loops take either and know nothing else of a model.
"""

from __future__ import annotations

from typing import Optional, Protocol, Sequence

import numpy as np

from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.engine.compute.tokenizer import Tokenizer

# Which weights a forward runs (a backbone without a river runs its only weights):
#   "auto"      a multi-token forward takes the prompt's route, one token the decode route
#   "prompt"    the route of a prompt (the full backbone, or the exit policy with prefill="exit")
#   "decode"    the exit policy (River's per-token route)
#   "backbone"  the full backbone, whatever the policy
ROUTES = ("auto", "prompt", "decode", "backbone")


class Backbone(Protocol):
    """A causal language model with one sequence in its cache."""

    # The seed of sampling calls that name none (None: fresh entropy); a facade's default.
    seed: Optional[int]

    @property
    def n_vocab(self) -> int: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def n_past(self) -> int:
        """Positions in the cache."""
        ...

    @property
    def n_layer(self) -> int: ...

    @property
    def n_threads(self) -> int: ...

    @property
    def has_river(self) -> bool:
        """Whether it has a river: a policy that exits, and a river draft, need one."""
        ...

    @property
    def policy(self) -> ExitPolicy:
        """The exit policy of forwards that do not name one."""
        ...

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def last_exit_layers(self) -> np.ndarray:
        """Layers of full-precision weights each token of the last forward ran."""
        ...

    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]: ...

    def reset(self) -> None: ...

    def rewind(self, n_past: int) -> None: ...

    def check_policy(self, policy: ExitPolicy) -> None:
        """TypeError / ValueError unless `policy` applies to this model."""
        ...

    def forward(
        self,
        ids: Sequence[int],
        *,
        last_only: bool = False,
        route: str = "auto",
        policy: Optional[ExitPolicy] = None,
        exit_vocab: Optional[int] = None,
        prompt: bool = False,
    ) -> np.ndarray:
        """Append `ids` to the cache; logits [len(ids) or 1, n_vocab]. `policy` and
        `exit_vocab` shape this forward's exits (None: the default policy, every token id).
        `prompt`: the ids are a prompt, prefilled alike by every decoding, so their rows
        need not equal one-token steps (a backbone may take faster kernels)."""
        ...

    def cached_prefix(self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None) -> int:
        """How many leading `ids` the cache, or the prompt cache, holds exactly as a cold
        forward of them on `route` (under `policy`) would compute them (at most
        len(ids) - 1: the last must run). A query: the cache is left as it is."""
        ...

    def reuse_prefix(self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None) -> int:
        """Bring the cache to the longest prefix of `ids` that cached_prefix finds
        (restoring it from the prompt cache where that holds more) and drop the rest;
        its length. Called by a prefill, under the caller's lock."""
        ...


def drafting_home(model: object) -> object:
    """The object that keeps the draft memory of the generations on `model`'s sequence
    (river_cpp.decoding.draft_memory): the backbone itself, one sequence's on a model of
    several (the scheduler asks it on the sequence a generation runs on). What drafting
    learns of lengths is the model's: its `learned_drafting` dict."""
    return getattr(model, "drafting_home", model)


def check_token_ids(ids: Sequence[int]) -> np.ndarray:
    """`ids` as a 1-D integer array; ValueError / TypeError for anything else."""
    array = np.asarray(ids)
    if array.ndim != 1 or array.size == 0:
        raise ValueError("ids must be a non-empty 1-D sequence of token ids")
    if not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"token ids must be integers, got dtype {array.dtype}")
    return array


def check_n_past(n_past: object, held: int) -> int:
    """`n_past` as an int in [0, held]; ValueError otherwise."""
    if isinstance(n_past, bool) or not isinstance(n_past, (int, np.integer)) or not 0 <= n_past <= held:
        raise ValueError(f"n_past must be an integer in [0, {held}], got {n_past!r}")
    return int(n_past)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two sequences (lists or arrays) share: the one prefix
    match of the sequences, the prompt cache and drafting."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if differ.size else n
