"""The pool that lends a model's sequences to generations.

A model loaded with n_seq_max = N keeps N sequences in one KV cache, n_ctx positions
each. A generation takes a free one (the one holding the longest prefix of its
prompt, within its prompt-cache scope), runs the one loop on it as on any backbone
(river_cpp.engine.graph_backbone.BackboneSequence), and gives it back; its forwards
run in batches with the other sequences' (river_cpp.engine.batcher). Sequence 0 is
also the one the model's own forward, rewind and reset act on, so those wait while a
generation holds it.
"""

from __future__ import annotations

import threading
import time
from typing import Optional, Sequence

from river_cpp.engine._lock import ModelLock
from river_cpp.engine.backbone import common_prefix
from river_cpp.engine.prompt_cache import current_scope


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
