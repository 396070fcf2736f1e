"""The sequences of a graph backbone's cache: each as a backbone of its own, and the
pool that lends them to generations.

A model loaded with n_seq_max = N keeps N sequences in one KV cache, n_ctx positions
each. A generation takes a free one (the one holding the longest prefix of its
prompt, within its prompt-cache scope), runs the one loop on it as on any backbone,
and gives it back; its forwards run in batches with the other sequences' (see
river_cpp.engine.batcher). Sequence 0 is also the one the model's own forward,
rewind and reset act on, so those wait while a generation holds it.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

from river_cpp.engine._lock import ModelLock
from river_cpp.engine.backbone import common_prefix
from river_cpp.engine.policy import ExitPolicy
from river_cpp.engine.prompt_cache import current_scope
from river_cpp.engine.tokenizer import Tokenizer

if TYPE_CHECKING:
    from river_cpp.engine.graph_backbone import GraphBackbone
    from river_cpp.engine.prompt_cache import PromptCache


class BackboneSequence:
    """One sequence of a GraphBackbone's cache, behind the Backbone protocol
    (river_cpp.engine.backbone): what a generation on that sequence runs on. Its
    drafting statistics and draft memory, kept per backbone object, are its own."""

    kind = "graph"
    rewinds_anywhere = True

    def __init__(self, backbone: GraphBackbone, seq: int) -> None:
        self.backbone = backbone
        self.seq = seq

    @property
    def seed(self) -> Optional[int]:
        return self.backbone.seed

    @property
    def prompt_cache(self) -> Optional[PromptCache]:
        return self.backbone.prompt_cache

    @property
    def n_vocab(self) -> int:
        return self.backbone.n_vocab

    @property
    def n_ctx(self) -> int:
        return self.backbone.n_ctx

    @property
    def n_embd(self) -> int:
        return self.backbone.n_embd

    @property
    def n_layer(self) -> int:
        return self.backbone.n_layer

    @property
    def n_threads(self) -> int:
        return self.backbone.n_threads

    @property
    def has_river(self) -> bool:
        return self.backbone.has_river

    @property
    def policy(self) -> ExitPolicy:
        return self.backbone.policy

    @property
    def tokenizer(self) -> Tokenizer:
        return self.backbone.tokenizer

    @property
    def shares_batches(self) -> bool:
        """Whether other sequences are in use, so that this one's forwards share batches."""
        batcher = self.backbone.batcher
        return batcher is not None and batcher.in_use > 1

    @property
    def n_past(self) -> int:
        """Positions this sequence holds."""
        return self.backbone.seq_n_past(self.seq)

    @property
    def cached_ids(self) -> list[int]:
        return self.backbone.sequence_ids(self.seq)

    @property
    def last_exit_layers(self) -> np.ndarray:
        return self.backbone.seq_last_exit_layers(self.seq)

    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        return self.backbone.tokenize(text, add_bos=add_bos, special=special)

    def check_policy(self, policy: ExitPolicy) -> None:
        self.backbone.check_policy(policy)

    def state_key(self) -> str:
        return self.backbone.state_key()

    def reset(self) -> None:
        self.backbone.reset(seq=self.seq)

    def rewind(self, n_past: int) -> None:
        self.backbone.rewind(n_past, seq=self.seq)

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
        return self.backbone.forward(
            ids, last_only=last_only, route=route, policy=policy, exit_vocab=exit_vocab, prompt=prompt, seq=self.seq
        )

    def cached_prefix(self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None) -> int:
        return self.backbone.cached_prefix(ids, route=route, policy=policy, seq=self.seq)

    def reuse_prefix(self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None) -> int:
        return self.backbone.reuse_prefix(ids, route=route, policy=policy, seq=self.seq)

    def prefix_state(self) -> tuple[list[int], bytes]:
        return self.backbone.prefix_state(seq=self.seq)

    def restore_prefix(self, ids: Sequence[int], state: bytes) -> None:
        self.backbone.restore_prefix(ids, state, seq=self.seq)


class SequencePool:
    """Lends a model's sequences: one lock per sequence (sequence 0's is the model's
    own), and the choice of which free sequence a generation takes."""

    def __init__(self, n_seq: int) -> None:
        self.locks = [ModelLock() for _ in range(n_seq)]
        self._condition = threading.Condition()
        self._scopes = [""] * n_seq  # the prompt-cache scope of the generation that filled each
        self._last_used = [0.0] * n_seq

    @property
    def n_seq(self) -> int:
        return len(self.locks)

    def acquire(self, held: Sequence[Sequence[int]], prompt_ids: Optional[Sequence[int]]) -> tuple[int, bool]:
        """Take a free sequence (waiting for one): the one whose `held` ids share the
        longest prefix with `prompt_ids` within the caller's prompt-cache scope, else
        the least recently used. Returns (seq, fresh): fresh when it held another
        scope's tokens, which the caller must forget first. Give it back with release."""
        scope = current_scope()
        seq = self._acquire(held, prompt_ids, scope)
        fresh = self._scopes[seq] != scope
        self._scopes[seq] = scope
        return seq, fresh

    def release(self, seq: int) -> None:
        """Give back a sequence acquire returned (from any thread)."""
        self._last_used[seq] = time.monotonic()
        self.locks[seq].release()
        with self._condition:
            self._condition.notify_all()

    def _acquire(self, held: Sequence[Sequence[int]], prompt_ids: Optional[Sequence[int]], scope: str) -> int:
        def score(s: int) -> tuple[int, float]:
            shared = common_prefix(held[s], prompt_ids) if prompt_ids and self._scopes[s] == scope else 0
            return shared, -self._last_used[s]

        order = sorted(range(self.n_seq), key=score, reverse=True)
        with self._condition:
            while True:
                for seq in order:  # the best that is free (or already this thread's)
                    if self.locks[seq].acquire(blocking=False):
                        return seq
                # a lock held outside the pool (sequence 0's, by the model's own calls)
                # notifies nobody here: look again now and then
                self._condition.wait(0.05)
