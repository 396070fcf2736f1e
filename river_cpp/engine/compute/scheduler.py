"""One loop drives every running generation of a model: the scheduler.

A generation is a request loop (river_cpp.engine.compute.requests): a generator that yields
what it asks of its sequence (a Forward, a Call) and its outputs (chunks). The
scheduler owns the model's sequences and every use of them. A reader asking for its
generation's next output drives the scheduler itself, on its own thread, in rounds:

1. each generation that may go on is resumed until it asks a Forward or yields an
   output; its Calls (rewind, reuse_prefix, reads) run on its sequence at once;
2. the forwards asked are run as one batch (river_cpp.engine.compute.batcher) and each is
   sent its result.

So a generation alone runs on its reader's thread with no hop and no wait, and several
are batched as soon as each has asked: no timer. Only the thread driving a round
touches a sequence, and never while it computes (the lock is let go during a compute
only; whoever needs the scheduler then waits for the round to end). A generation
whose reader is not waiting may run ahead by one output, on the sequence it holds,
so that streams read in turn (on one thread or several) still share batches; one not
read at all never holds a batch up.

Sequences are leased here: a generation takes one at its first request (the one
holding the longest prefix of its prompt in its prompt-cache scope, else the least
recently used) and gives it back when it ends. Where none is free, it waits for
another thread's generation to end; but a holder whose reader is the waiting
generation's own thread can only go on once that thread reads it, so its sequence is
taken over: what it holds is saved (every position's K/V as stored) and put back, on
whichever sequence it gets, at its next request. The state put back is the very bits
it held, so every answer is the one it gets alone. The model's own calls (forward,
rewind, ...) are generations pinned to sequence 0.

An error of a request is thrown into its generation where it asked. A failure of the
scheduler itself fails the generations of that round with a RuntimeError (their
sequences reset) and the scheduler serves on. close() ends every generation and waits
for one compute at most.
"""

from __future__ import annotations

import contextvars
import threading
import time
import weakref
from collections import deque
from typing import Any, Callable, Iterator, Optional, Sequence

from river_cpp.engine.compute.backbone import common_prefix
from river_cpp.engine.compute.batcher import DEFAULT_CHUNK, ForwardRequest, check_chunk, deliver, run_batch, take_batch
from river_cpp.engine.compute.prompt_cache import current_scope
from river_cpp.engine.compute.requests import Call, Forward, Requests, perform

# What a generation reads of its model as it is: the same on every sequence.
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
        "learned_drafting",
    }
)


class Model:
    """What a generation's loop reads of its model between requests (sizes, tokenizer,
    policy, what drafting learned: the backbone's, one for all sequences), and whether
    other sequences share its batches now."""

    def __init__(self, scheduler: Scheduler, backbone: Any) -> None:
        self._scheduler = scheduler
        self._backbone = backbone

    def __getattr__(self, name: str) -> Any:
        if name in _SHARED:
            return getattr(self._backbone, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def shares_batches(self) -> bool:
        """Whether other sequences are in use, so that this one's forwards share batches."""
        return self._scheduler.in_use > 1


class Generation:
    """One generation on the scheduler: its loop, the sequence it holds, what it asked
    and what it produced for its reader."""

    def __init__(self, steps: Requests, prompt_ids: Optional[Sequence[int]], pinned: Optional[int]) -> None:
        self.steps = steps
        self.prompt_ids = list(prompt_ids) if prompt_ids else None
        self.scope = current_scope()
        self.context = contextvars.copy_context()  # its reader's (the prompt cache's scope)
        self.pinned = pinned  # the one sequence it may take (the model's own calls: 0)
        self.seq: Optional[int] = None  # the sequence it holds now
        self.home: Any = None  # the backbone of the first sequence it held
        self.saved: Any = None  # what it held, while another generation holds its sequence
        self.reply: Any = None  # the result its loop is sent next
        self.raise_next: Optional[BaseException] = None  # or the error thrown into it
        self.pending: Optional[ForwardRequest] = None  # the forward it waits for
        self.forward: Optional[Forward] = None  # that forward, where it runs alone
        self.outbox: deque[Any] = deque()
        self.reader: Optional[int] = None  # the thread that last asked for its next output
        self.waiting = False  # its reader waits for it now
        self.last_used = 0.0
        self.abandoned = False  # its stream was dropped unclosed: ended at the next round
        self.finished = False
        self.result: Any = None
        self.error: Optional[BaseException] = None


class Scheduler:
    """The one loop over a model's sequences (`views`: one backbone per sequence).
    `rows`: the backbone whose forwards several sequences share a batch of
    (GraphBackbone: prepare_forward, run_rows, complete_forward, abandon_forward);
    None: each forward runs alone on its sequence. `on_end(view)`: called as a
    generation that holds a sequence ends (the prompt cache keeps it)."""

    def __init__(
        self,
        views: Sequence[Any],
        *,
        rows: Any = None,
        chunk: int = DEFAULT_CHUNK,
        on_end: Optional[Callable[[Any], None]] = None,
    ) -> None:
        self.views = list(views)
        self._rows = rows
        self.chunk = check_chunk(chunk, rows.n_batch) if rows is not None else chunk
        self.on_end = on_end
        self.model = Model(self, self.views[0])
        self._condition = threading.Condition()
        self._live: list[Generation] = []
        self._holders: list[Optional[Generation]] = [None] * len(self.views)
        self._scopes = [""] * len(self.views)  # the prompt-cache scope of the generation that filled each
        self._last_used = [0.0] * len(self.views)
        self._driver: Optional[int] = None  # the thread running a round
        self._closed = False
        self.rounds = 0  # rounds that computed; of them, batches of several sequences
        self.shared_batches = 0
        self.rows_computed = 0

    @property
    def n_seq(self) -> int:
        return len(self.views)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_use(self) -> int:
        """Sequences held by generations now."""
        return sum(g is not None and not g.abandoned for g in self._holders)

    # ---------------------------------------------------------------- readers

    def start(self, steps: Requests, prompt_ids: Optional[Sequence[int]] = None) -> Stream:
        """Run the loop `steps` (of `prompt_ids`, where known: it prefers the sequence
        holding their longest prefix); its outputs. Nothing runs before the first is
        asked, and no sequence is taken before."""
        return Stream(self, self._add(Generation(steps, prompt_ids, None)))

    def call(self, steps: Requests, *, seq: int = 0) -> Any:
        """Run a loop that yields no outputs on sequence `seq` (the model's own calls);
        its return value."""
        generation = self._add(Generation(steps, None, seq))
        try:
            item = self.next(generation)
        except StopIteration as done:
            return done.value
        self.end(generation)
        raise TypeError(f"a model call yielded an output: {item!r}")

    def next(self, generation: Generation) -> Any:
        """The generation's next output, driving rounds until it has one; raises
        StopIteration (with its return value) at its end, and what its loop raised."""
        me = threading.get_ident()
        with self._condition:
            self._check_not_driving(me)
            generation.reader = me
            generation.waiting = True
            try:
                while not generation.outbox and not generation.finished:
                    if self._closed:
                        self._finish(generation, error=ValueError("this RiverModel is closed"), keep=False)
                        break
                    if self._driver is not None:
                        self._condition.wait()
                        continue
                    if not self._drive(me):
                        self._condition.wait()  # nothing can go on before another reader, an end or a close
            finally:
                generation.waiting = False
            if generation.outbox:
                return generation.outbox.popleft()
        if generation.error is not None:
            raise generation.error
        raise StopIteration(generation.result)

    def end(self, generation: Generation) -> None:
        """End a generation its reader is done with (closing its loop); idempotent."""
        with self._condition:
            self._check_not_driving(threading.get_ident())
            while self._driver is not None:  # its sequence may be in the batch computing now
                self._condition.wait()
            if not generation.finished:
                generation.context.run(self._close_loop, generation)
            self._condition.notify_all()

    def close(self) -> None:
        """End every generation: from now on each asks in vain (ValueError). Returns
        once the compute running now ends (one batch at most): a stream nobody reads
        does not hold it up."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
            while self._driver is not None:
                self._condition.wait()
            for generation in list(self._live):
                generation.outbox.clear()  # what it ran ahead is not read either
                self._finish(generation, error=ValueError("this RiverModel is closed"), keep=False)
                generation.steps.close()

    # ---------------------------------------------------------------- rounds

    def _check_not_driving(self, me: int) -> None:
        if self._driver == me:
            raise RuntimeError(
                "a generation's loop asked the model for a generation of its own (a model call from a "
                "logits processor?): it would wait for itself"
            )

    def _add(self, generation: Generation) -> Generation:
        with self._condition:
            if self._closed:
                raise ValueError("this RiverModel is closed")
            self._live.append(generation)
        return generation

    def _drive(self, me: int) -> bool:
        """Under the condition: run one round as its driver; whether anything went on."""
        self._driver = me
        try:
            return self._round()
        except Exception as fault:  # noqa: BLE001 - the scheduler's own failure fails its round, not the model
            self._fail_round(fault)
            return True
        finally:
            self._driver = None
            self._condition.notify_all()

    def _round(self) -> bool:
        moved = False
        for generation in [g for g in self._live if g.abandoned]:
            generation.context.run(self._close_loop, generation)
            moved = True
        # Readers waiting go first: they may take sequences over; then those running ahead.
        for generation in sorted(self._live, key=lambda g: not g.waiting):
            if not self._may_go_on(generation):
                continue
            if generation.seq is None and not self._place(generation):
                continue
            generation.context.run(self._advance, generation)
            moved = True
        asking = [g for g in self._live if g.pending is not None or g.forward is not None]
        if asking:
            self._compute(asking)
            for generation in asking:  # on with the results at once: a round less per step
                if self._may_go_on(generation) and generation.seq is not None:
                    generation.context.run(self._advance, generation)
            moved = True
        return moved

    @staticmethod
    def _may_go_on(generation: Generation) -> bool:
        """Whether a round resumes the generation: it asks nothing now, and its reader
        waits for it, or it holds a sequence and has no output waiting (it runs ahead
        by one output at most)."""
        if generation.finished or generation.pending is not None or generation.forward is not None:
            return False
        return generation.waiting or (not generation.outbox and generation.seq is not None)

    def _advance(self, generation: Generation) -> None:
        """Resume the generation's loop until it asks a forward, yields an output or
        ends; its Calls run on its sequence meanwhile."""
        view = self.views[generation.seq]
        generation.last_used = time.monotonic()
        while True:
            try:
                if generation.raise_next is not None:
                    error, generation.raise_next = generation.raise_next, None
                    item = generation.steps.throw(error)
                else:
                    reply, generation.reply = generation.reply, None
                    item = generation.steps.send(reply)
            except StopIteration as done:
                self._finish(generation, result=done.value)
                return
            except Exception as error:  # noqa: BLE001 - the loop's own error is its reader's
                self._finish(generation, error=error)
                return
            if isinstance(item, Call):
                try:
                    generation.reply = perform(view, item)
                except Exception as error:  # noqa: BLE001 - thrown into the loop where it asked
                    generation.raise_next = error
                continue
            if isinstance(item, Forward):
                if self._rows is None:
                    generation.forward = item
                    return
                try:
                    generation.pending = self._rows.prepare_forward(item.ids, seq=generation.seq, **item.options())
                except Exception as error:  # noqa: BLE001
                    generation.raise_next = error
                    continue
                return
            generation.outbox.append(item)
            return

    def _compute(self, asking: list[Generation]) -> None:
        """Run the forwards asked, as one batch, with the lock let go meanwhile."""
        self.rounds += 1
        if self._rows is None:  # each alone (one sequence per backbone, as llama.cpp's here)
            for generation in asking:
                forward, generation.forward = generation.forward, None
                view = self.views[generation.seq]
                try:
                    generation.reply = self._unlocked(perform, view, forward)
                except Exception as error:  # noqa: BLE001
                    generation.raise_next = error
            return
        pending = [g.pending for g in asking]
        taken, exit = take_batch(pending, self._rows.n_batch, self.chunk, shared=self.in_use > 1)
        self.shared_batches += len(taken) > 1
        self.rows_computed += sum(n for _, n in taken)
        results = self._unlocked(run_batch, self._rows.run_rows, taken, exit)
        by_request = {id(g.pending): g for g in asking}
        for (request, n), result in zip(taken, results):
            generation = by_request[id(request)]
            if isinstance(result, BaseException):
                self._rows.abandon_forward(request)
                generation.pending, generation.raise_next = None, result
                continue
            deliver(request, n, result)
            if request.finished:
                generation.pending = None
                generation.reply = self._rows.complete_forward(request)

    def _unlocked(self, run: Callable, *args: Any) -> Any:
        self._condition.release()
        try:
            return run(*args)
        finally:
            self._condition.acquire()

    def _fail_round(self, fault: BaseException) -> None:
        """The scheduler itself failed in a round: every generation that asked or was
        waited for fails, its sequence reset (what it held may be half written)."""
        error = RuntimeError(f"the scheduler failed, and with it this generation: {fault!r}")
        error.__cause__ = fault
        for generation in list(self._live):
            if generation.pending is None and generation.forward is None and not generation.waiting:
                continue
            if generation.seq is not None:
                try:
                    self.views[generation.seq].reset()
                except Exception:  # noqa: BLE001 - the generation fails either way
                    pass
            generation.pending = generation.forward = None
            self._finish(generation, error=error, keep=False)
            generation.steps.close()

    def _close_loop(self, generation: Generation) -> None:
        """End a generation its reader dropped or closed: its loop is closed (its own
        cleanup runs), then it ends as if finished."""
        if generation.pending is not None:
            self._rows.abandon_forward(generation.pending)
            generation.pending = None
        generation.forward = None
        try:
            generation.steps.close()
        finally:
            self._finish(generation)

    def _finish(self, generation: Generation, *, result: Any = None, error: Any = None, keep: bool = True) -> None:
        """The generation ended: give its sequence back (after `on_end`, where `keep`)."""
        if generation.finished:
            return
        generation.finished, generation.result, generation.error = True, result, error
        if generation in self._live:
            self._live.remove(generation)
        if generation.seq is not None:
            if keep and generation.pinned is None and self.on_end is not None and not self._closed:
                self.on_end(self.views[generation.seq])
            self._vacate(generation)
        generation.saved = None
        self._condition.notify_all()

    # ---------------------------------------------------------------- sequences

    def _place(self, generation: Generation) -> bool:
        """Give the generation a sequence: a free one, else one that a generation read
        by its own reader's thread holds idle (taken over); False where it must wait."""
        candidates = range(self.n_seq) if generation.pinned is None else (generation.pinned,)
        free = [s for s in candidates if self._holders[s] is None]
        if free:
            seq = max(free, key=lambda s: self._score(generation, s))
        else:
            idle = [
                s
                for s in candidates
                if self._holders[s].reader == generation.reader
                and not self._holders[s].waiting
                and self._holders[s].pending is None
                and self._holders[s].forward is None
            ]
            if not idle or not generation.waiting:
                return False
            seq = min(idle, key=lambda s: self._holders[s].last_used)
            holder = self._holders[seq]
            holder.saved = self.views[seq].save_sequence()
            self._vacate(holder)
        view = self.views[seq]
        if generation.saved is not None:
            view.load_sequence(generation.saved)
            generation.saved = None
            self._scopes[seq] = generation.scope
        elif generation.pinned is None and generation.home is None and self._scopes[seq] != generation.scope:
            view.reset()  # another prompt-cache scope's tokens are not this one's to reuse
            self._scopes[seq] = generation.scope
        self._holders[seq] = generation
        generation.seq = seq
        if generation.home is None:
            generation.home = view
        return True

    def _score(self, generation: Generation, seq: int) -> tuple[int, float]:
        """Which free sequence a generation prefers: for its first, the longest held
        prefix of its prompt within its scope, then the least recently used."""
        shared = 0
        if generation.home is None and generation.prompt_ids and self._scopes[seq] == generation.scope:
            shared = common_prefix(self.views[seq].cached_ids, generation.prompt_ids)
        return shared, -self._last_used[seq]

    def _vacate(self, generation: Generation) -> None:
        self._holders[generation.seq] = None
        self._last_used[generation.seq] = time.monotonic()
        generation.seq = None


class Stream:
    """A generation's outputs for its reader (an iterator whose StopIteration carries
    the loop's return value). close() ends it; dropped unclosed, it ends at the
    scheduler's next round."""

    def __init__(self, scheduler: Scheduler, generation: Generation) -> None:
        self._scheduler = scheduler
        self._generation = generation
        weakref.finalize(self, _abandon, scheduler, generation)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        return self._scheduler.next(self._generation)

    def close(self) -> None:
        self._scheduler.end(self._generation)


def _abandon(scheduler: Scheduler, generation: Generation) -> None:
    """A stream dropped unclosed: its generation ends at the next round, and the readers
    waiting are told. The collector may run on a thread that holds the lock: where it
    is held, a thread of its own tells them once it is free."""
    generation.abandoned = True
    condition = scheduler._condition
    if condition.acquire(blocking=False):
        try:
            condition.notify_all()
        finally:
            condition.release()
    else:
        threading.Thread(target=_notify, args=(condition,), name="river-cpp-abandoned", daemon=True).start()


def _notify(condition: threading.Condition) -> None:
    with condition:
        condition.notify_all()
