"""The pool that lends a model's sequences to generations, one lease per generation.

A model loaded with n_seq_max = N keeps N sequences in one KV cache, n_ctx positions
each. A generation runs the one loop on a Lease (a Backbone): at its first call that
touches a sequence the lease takes a free one (the one holding the longest prefix of
its prompt, within its prompt-cache scope, else the least recently used), and it gives
it back when the generation ends; its forwards run in batches with the other sequences'
(river_cpp.engine.compute.batcher). Sequence 0 is also the one the model's own forward, rewind
and reset act on: each of those takes it for the call (model_call).

Leases, not threads, hold sequences: one thread may read several streams in turn.
Where a lease needs a sequence and none is free, it waits for another thread's
generation to end; but waiting for a lease this thread itself runs would never end,
so it takes that lease's sequence over: the lease taken over saves everything its
sequence holds (the backbone's save_sequence: every position's K/V as stored, the ids)
and puts it back, on whichever sequence it then gets, at its next call. A sequence is
thus lent only between two calls of its lease, never during one, and the state put
back is the very bits it held, so every answer is the one it gets alone.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Iterator, Optional, Sequence

from river_cpp.engine.compute.backbone import common_prefix
from river_cpp.engine.compute.prompt_cache import current_scope

# What a lease reads from the sequences' backbone as it is: the same on every sequence.
_SHARED = frozenset(
    {
        "kind",
        "rewinds_anywhere",
        "seed",
        "prompt_cache",
        "n_vocab",
        "n_ctx",
        "n_embd",
        "n_layer",
        "n_threads",
        "has_river",
        "policy",
        "tokenizer",
        "tokenize",
        "check_policy",
        "state_key",
        "shares_batches",
    }
)


class SequencePool:
    """Lends a model's sequences (their backbones `views`, one per sequence) to leases.

    `hold(delta)` hears each sequence a lease takes (+1) or gives back (-1): how many a
    batch of the batcher waits for. One condition guards every holder; each change
    notifies it, so that a waiting lease looks again exactly when something changed.
    """

    def __init__(self, views: Sequence[Any], *, hold: Optional[Callable[[int], None]] = None) -> None:
        self.views = list(views)
        self._hold = hold
        self._condition = threading.Condition(threading.RLock())
        self._holders: list[Optional[Lease]] = [None] * len(self.views)
        self._scopes = [""] * len(self.views)  # the prompt-cache scope of the lease that filled each
        self._last_used = [0.0] * len(self.views)
        self._closed = False

    @property
    def n_seq(self) -> int:
        return len(self.views)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_use(self) -> int:
        """Sequences held by leases now."""
        with self._condition:
            return sum(lease is not None for lease in self._holders)

    def lease(self, prompt_ids: Optional[Sequence[int]] = None) -> Lease:
        """A lease for one generation (of `prompt_ids`, where known: it prefers the
        sequence holding their longest prefix), in the caller's prompt-cache scope. It
        takes no sequence before its first call that needs one."""
        return Lease(self, prompt_ids, current_scope())

    @contextlib.contextmanager
    def model_call(self) -> Iterator[None]:
        """Hold sequence 0 for one of the model's own calls (forward, rewind, ...), which
        act on what it holds."""
        lease = Lease(self, None, "", pinned=0)
        try:
            with lease.resident():
                yield
        finally:
            lease.release()

    def close(self) -> None:
        """End every lease: from now on each call on one raises ValueError. Returns once
        the calls running now end (a forward at most each): a stream nobody reads or
        closes does not hold it up."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
            while any(lease is not None and lease.busy for lease in self._holders):
                self._condition.wait()

    # ---------------------------------------------------------------- what leases call

    def _enter(self, lease: Lease) -> Any:
        """Under the lease's call: the backbone of the sequence it holds, taken (and its
        saved state put back) first where it holds none."""
        me = threading.get_ident()
        with self._condition:
            while True:
                if self._closed:
                    raise ValueError("this RiverModel is closed")
                if lease.ended:
                    raise ValueError("this generation has ended: its lease was given back")
                if lease.seq is not None or self._place(lease, me):
                    break
                self._condition.wait()
            lease.busy += 1
            lease.runner = me
            lease.last_used = time.monotonic()
            return self.views[lease.seq]

    def _leave(self, lease: Lease) -> None:
        with self._condition:
            lease.busy -= 1
            self._condition.notify_all()

    def _release(self, lease: Lease) -> None:
        with self._condition:
            lease.ended = True
            lease.saved = None
            if lease.seq is not None:
                self._vacate(lease)
            self._condition.notify_all()

    def _place(self, lease: Lease, me: int) -> bool:
        """Give `lease` a sequence: a free one, else one that a lease of this thread holds
        between its calls (taken over); False where it must wait for another thread's."""
        candidates = range(self.n_seq) if lease.pinned is None else (lease.pinned,)
        free = [s for s in candidates if self._holders[s] is None]
        if free:
            seq = max(free, key=lambda s: self._score(lease, s))
        else:
            mine = [s for s in candidates if self._holders[s].runner == me]
            idle = [s for s in mine if not self._holders[s].busy]
            if not idle:
                if mine and len(mine) == len(candidates):
                    raise RuntimeError(
                        "this thread asked for a sequence of the model while every one is in a call of its own "
                        "(a model call from inside a forward?): it would wait for itself"
                    )
                return False
            seq = min(idle, key=lambda s: self._holders[s].last_used)
            self._take_over(seq)
        view = self.views[seq]
        if lease.saved is not None:
            view.load_sequence(lease.saved)  # raises before anything changed here
            lease.saved = None
            self._scopes[seq] = lease.scope
        elif lease.pinned is None and not lease.placed and self._scopes[seq] != lease.scope:
            view.reset()  # another prompt-cache scope's tokens are not this one's to reuse
            self._scopes[seq] = lease.scope
        self._holders[seq] = lease
        lease.seq = seq
        if lease.home is None:
            lease.home = view
        lease.placed = True
        if self._hold is not None:
            self._hold(1)
        return True

    def _score(self, lease: Lease, seq: int) -> tuple[int, float]:
        """Which free sequence a lease prefers: for its first, the longest held prefix
        of its prompt within its scope, then the least recently used."""
        shared = 0
        if not lease.placed and lease.prompt_ids and self._scopes[seq] == lease.scope:
            shared = common_prefix(self.views[seq].cached_ids, lease.prompt_ids)
        return shared, -self._last_used[seq]

    def _take_over(self, seq: int) -> None:
        """Lend sequence `seq` away from its holder, which saves what it holds first."""
        holder = self._holders[seq]
        holder.saved = self.views[seq].save_sequence()
        self._vacate(holder)

    def _vacate(self, lease: Lease) -> None:
        self._holders[lease.seq] = None
        self._last_used[lease.seq] = time.monotonic()
        lease.seq = None
        if self._hold is not None:
            self._hold(-1)


class Lease:
    """One generation's sequence of a model: the Backbone (river_cpp.engine.compute.backbone) its
    loop runs on. Each call that touches the sequence runs on the sequence the lease
    holds, taking one first (see river_cpp.engine.compute.sequences); the backbone's other
    members (sizes, tokenizer, policy, ...) are read as they are. Give it back with
    release() (from any thread)."""

    def __init__(
        self, pool: SequencePool, prompt_ids: Optional[Sequence[int]], scope: str, *, pinned: Optional[int] = None
    ) -> None:
        self._pool = pool
        self.prompt_ids = list(prompt_ids) if prompt_ids else None
        self.scope = scope
        self.pinned = pinned  # the one sequence it may take (the model's own calls: 0)
        self.seq: Optional[int] = None  # the sequence it holds now
        self.home: Any = None  # the backbone of the first sequence it held
        self.placed = False  # it has held a sequence
        self.saved: Any = None  # what it held, while another lease holds its sequence
        self.busy = 0  # calls running on it now (a sequence is never taken over during one)
        self.runner: Optional[int] = None  # the thread of its latest call
        self.last_used = 0.0
        self.ended = False

    def __getattr__(self, name: str) -> Any:
        if name in _SHARED:
            return getattr(self._pool.views[0], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @contextlib.contextmanager
    def resident(self) -> Iterator[Any]:
        """For one call: the backbone of the sequence this lease holds, taken first
        where it holds none (waiting for one while every sequence is in another thread's
        generations)."""
        view = self._pool._enter(self)
        try:
            yield view
        finally:
            self._pool._leave(self)

    @property
    def holds_sequence(self) -> bool:
        """Whether it holds a sequence now (not given back, not lent to another lease)."""
        return self.seq is not None

    def release(self) -> None:
        """Give the sequence back (what it holds stays, for the next lease to reuse) and
        end the lease; idempotent."""
        self._pool._release(self)

    @property
    def drafting_home(self) -> Any:
        """What keeps the drafting statistics and draft memory of the generations on
        this lease's sequence (river_cpp.engine.compute.backbone.drafting_home): the backbone of
        the first sequence it held."""
        with self.resident():
            return self.home

    # ---------------------------------------------------------------- the sequence

    @property
    def n_past(self) -> int:
        with self.resident() as view:
            return view.n_past

    @property
    def cached_ids(self) -> list[int]:
        with self.resident() as view:
            return view.cached_ids

    @property
    def last_exit_layers(self):
        with self.resident() as view:
            return view.last_exit_layers

    def reset(self) -> None:
        with self.resident() as view:
            view.reset()

    def rewind(self, n_past: int) -> None:
        with self.resident() as view:
            view.rewind(n_past)

    def forward(self, ids: Sequence[int], **options: Any):
        """The backbone's forward (its options: last_only, route, policy, exit_vocab,
        prompt) on this lease's sequence."""
        with self.resident() as view:
            return view.forward(ids, **options)

    def cached_prefix(self, ids: Sequence[int], **options: Any) -> int:
        with self.resident() as view:
            return view.cached_prefix(ids, **options)

    def reuse_prefix(self, ids: Sequence[int], **options: Any) -> int:
        with self.resident() as view:
            return view.reuse_prefix(ids, **options)

    def prefix_state(self) -> tuple[list[int], bytes]:
        with self.resident() as view:
            return view.prefix_state()

    def restore_prefix(self, ids: Sequence[int], state: bytes) -> None:
        with self.resident() as view:
            view.restore_prefix(ids, state)
