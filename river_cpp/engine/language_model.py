"""The one protocol the generation loop runs on: something that gives logits.

RiverModel implements it, and so does the llama.cpp peer that measurement compares
against (river_cpp.measure). The loop (river_cpp.decoding.generation) and the speculative
loop (river_cpp.decoding.speculative) know nothing else of a model.
"""

from __future__ import annotations

from typing import Optional, Protocol, Sequence

import numpy as np

from river_cpp.decoding.policy import ExitPolicy
from river_cpp.engine.tokenizer import Tokenizer

# Which weights a forward runs (RiverModel; a plain model runs its only weights):
#   "auto"      a multi-token forward takes the prompt's route, one token the decode route
#   "prompt"    the route of a prompt (the full backbone, or the exit policy with prefill="exit")
#   "decode"    the exit policy (River's per-token route)
#   "backbone"  the full backbone, whatever the policy
ROUTES = ("auto", "prompt", "decode", "backbone")


class LanguageModel(Protocol):
    """A causal language model with one sequence in its cache."""

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
    ) -> np.ndarray:
        """Append `ids` to the cache; logits [len(ids) or 1, n_vocab]. `policy` and
        `exit_vocab` shape this forward's exits (None: the model's policy, every token id)."""
        ...

    def cached_prefix(self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None) -> int:
        """How many leading `ids` the cache already holds exactly as a cold forward of
        them on `route` (under `policy`) would compute them (at most len(ids) - 1: the
        last must run)."""
        ...
