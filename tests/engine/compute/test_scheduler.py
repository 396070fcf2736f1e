"""river_cpp.engine.compute.scheduler with fake sequences (no model): generations read in turn
on one thread and on several keep what they hold, a lone generation runs on its
reader's thread with no wait, several share batches as soon as each has asked, a
failure of the scheduler fails only the generations of its round, and close() is
bounded. With a model: tests/test_model_sequences.py, tests/engine/compute/test_sequences.py."""

from __future__ import annotations

import threading
import time
from typing import Optional

import numpy as np
import pytest
from in_turn import read_in_turn

from river_cpp.engine.compute.batcher import ForwardRequest
from river_cpp.engine.compute.requests import Forward, call
from river_cpp.engine.compute.scheduler import Scheduler

WAIT = 30  # seconds before a test gives up on a thread


class FakeSequence:
    """A sequence's backbone: the ids it holds; a forward appends its ids and returns
    what the sequence then holds; saves and loads are counted. A forward of `block`
    waits for `release` first."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.saves = self.loads = 0
        self.block: Optional[int] = None
        self.entered = threading.Event()
        self.release = threading.Event()
        self.threads: set[int] = set()  # where its forwards ran

    @property
    def cached_ids(self) -> list[int]:
        return list(self.ids)

    def forward(self, ids, **options) -> list[int]:
        self.threads.add(threading.get_ident())
        if self.block in ids:
            self.entered.set()
            assert self.release.wait(WAIT)
        self.ids += list(ids)
        return list(self.ids)

    def reset(self) -> None:
        self.ids.clear()

    def save_sequence(self) -> list[int]:
        self.saves += 1
        return list(self.ids)

    def load_sequence(self, saved: list[int]) -> None:
        self.loads += 1
        self.ids[:] = saved


class FakeRows:
    """The batched forwards of FakeSequences (as GraphBackbone's): each batch's rows
    recorded; a row's logits are what its sequence holds after it."""

    n_batch = 512

    def __init__(self, views: list[FakeSequence]) -> None:
        self.views = views
        self.batches: list[list[int]] = []  # the sequences of each batch

    def prepare_forward(self, ids, *, seq: int, **options) -> ForwardRequest:
        return ForwardRequest(seq, np.asarray(ids, np.int32), False, False, None, True, n_past=len(self.views[seq].ids))

    def run_rows(self, rows, exit):
        self.batches.append([seq for seq, *_ in rows])
        out = []
        for seq, ids, _, _ in rows:
            self.views[seq].forward([int(i) for i in ids])
            out.append((np.asarray(self.views[seq].ids, np.float32), np.zeros(len(ids), np.int32)))
        return out

    def complete_forward(self, request: ForwardRequest) -> list[int]:
        return [int(x) for x in request.result()[0]]

    def abandon_forward(self, request: ForwardRequest) -> None:
        del self.views[request.seq].ids[request.n_past :]


def counting(first: int, steps: int):
    """A generation: from an empty sequence, `steps` forwards of one id each (first,
    first + 1, ...), yielding what the sequence holds after each; returns the last."""
    yield call("reset")
    held = []
    for step in range(steps):
        held = yield Forward([first + step])
        yield held
    return held


def expected(first: int, steps: int) -> list[list[int]]:
    return [list(range(first, first + n + 1)) for n in range(steps)]


def fakes(n_seq: int, *, batched: bool = False) -> tuple[Scheduler, list[FakeSequence], Optional[FakeRows]]:
    views = [FakeSequence() for _ in range(n_seq)]
    rows = FakeRows(views) if batched else None
    return Scheduler(views, rows=rows, chunk=64), views, rows


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("n_seq", [1, 2, 4])
def test_generations_read_in_turn_on_one_thread_each_keep_what_they_hold(n_seq, batched):
    """Three generations on one thread: with fewer sequences than generations, one takes
    another's over, which puts what it held back at its next request."""
    scheduler, views, _ = fakes(n_seq, batched=batched)
    streams = [scheduler.start(counting(100 * i, 5)) for i in range(3)]
    assert read_in_turn(streams) == [expected(100 * i, 5) for i in range(3)]
    assert (sum(v.saves for v in views) > 0) == (n_seq < 3)
    assert scheduler.in_use == 0  # every sequence given back


@pytest.mark.parametrize("n_seq", [1, 4])
def test_eight_threads_each_keep_what_they_hold(n_seq):
    scheduler, _, _ = fakes(n_seq, batched=n_seq > 1)
    results: dict[int, list] = {}

    def run(i: int) -> None:
        results[i] = list(scheduler.start(counting(100 * i, 6)))

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert results == {i: expected(100 * i, 6) for i in range(8)}
    assert scheduler.in_use == 0


def test_streams_read_in_turn_share_batches_as_soon_as_each_has_asked():
    """Reading one stream drives the round in which the other, holding its sequence and
    not ahead, asks too: from the second round on every batch holds both."""
    scheduler, _, rows = fakes(2, batched=True)
    streams = [scheduler.start(counting(100 * i, 6)) for i in range(2)]
    assert read_in_turn(streams) == [expected(0, 6), expected(100, 6)]
    assert [len(batch) for batch in rows.batches[1:-1]] == [2] * (len(rows.batches) - 2)
    assert scheduler.shared_batches >= 5


class _Watched(threading.Condition):
    """A condition that records every wait: with or without a timeout."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[Optional[float]] = []

    def wait(self, timeout: Optional[float] = None) -> bool:
        self.waits.append(timeout)
        return super().wait(timeout)


@pytest.mark.parametrize("batched", [False, True])
def test_a_lone_generation_runs_on_its_readers_thread_and_never_waits(batched):
    scheduler, views, _ = fakes(2, batched=batched)
    watched = scheduler._condition = _Watched()
    threads_before = threading.active_count()
    assert list(scheduler.start(counting(5, 4))) == expected(5, 4)
    assert scheduler.call(_one(call("cached_ids"))) in ([], list(range(5, 9)))
    assert watched.waits == []  # no wait at all: no timer, no hand-over
    assert set().union(*(v.threads for v in views)) == {threading.get_ident()}
    assert threading.active_count() == threads_before  # and no thread of its own


def test_waits_are_never_timed():
    """Where a reader waits (another thread's generation holds the only sequence), it
    waits for a change, never on a timer."""
    scheduler, _, _ = fakes(1)
    watched = scheduler._condition = _Watched()
    mine = scheduler.start(counting(1, 3))
    next(mine)
    got: list = []
    waiting = threading.Thread(target=lambda: got.append(list(scheduler.start(counting(50, 2)))), daemon=True)
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive() and not got  # another thread's generation is never taken over
    ended = time.monotonic()
    mine.close()
    waiting.join(WAIT)
    assert got == [expected(50, 2)] and time.monotonic() - ended < 1.0
    assert watched.waits and all(timeout is None for timeout in watched.waits)


def _one(request):
    return (yield request)


def test_a_model_call_on_the_thread_of_a_stream_takes_sequence_0_over():
    scheduler, views, _ = fakes(2)
    stream = scheduler.start(counting(1, 3))
    assert next(stream) == [1]  # the least recently used sequence: 0
    assert scheduler.call(_one(Forward([9]))) == [1, 9]  # the model's own call acts on what sequence 0 holds
    assert next(stream) == [1, 2] and views[0].saves == 1


def test_a_generations_error_is_its_own():
    scheduler, _, _ = fakes(2, batched=True)

    def failing():
        yield Forward([1])
        raise KeyError("its own")

    other = scheduler.start(counting(10, 3))
    bad = scheduler.start(failing())
    assert next(other) == [10]
    with pytest.raises(KeyError, match="its own"):
        next(bad)
    assert list(other) == expected(10, 3)[1:]


@pytest.mark.parametrize("batched", [False, True])
def test_a_failure_of_the_scheduler_fails_its_round_at_once_and_it_serves_on(monkeypatch, batched):
    scheduler, _, _ = fakes(4, batched=batched)
    streams = [scheduler.start(counting(100 * i, 4)) for i in range(2)]
    assert [next(s) for s in streams] == [[0], [100]]
    compute = scheduler._compute

    def broken(asking):
        monkeypatch.setattr(scheduler, "_compute", compute)  # once
        raise MemoryError("the scheduler's own bookkeeping failed")

    monkeypatch.setattr(scheduler, "_compute", broken)
    errors: list = []

    def read(stream) -> None:
        try:
            list(stream)
        except RuntimeError as error:
            errors.append(error)

    start = time.monotonic()
    readers = [threading.Thread(target=read, args=(s,), daemon=True) for s in streams]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(WAIT)
    assert errors and time.monotonic() - start < 1.0
    assert all("scheduler failed" in str(e) and isinstance(e.__cause__, MemoryError) for e in errors)
    assert list(scheduler.start(counting(7, 3))) == expected(7, 3)  # later generations are served
    assert scheduler.in_use == 0


def test_close_ends_every_generation_without_waiting_for_idle_ones():
    scheduler, _, _ = fakes(1)
    idle = scheduler.start(counting(1, 3))
    next(idle)  # holds the sequence, never read again nor closed: a leaked stream
    scheduler.close()
    with pytest.raises(ValueError, match="closed"):
        next(idle)
    with pytest.raises(ValueError, match="closed"):
        scheduler.start(counting(2, 1))
    idle.close()


def test_close_waits_for_the_compute_running_now():
    scheduler, views, _ = fakes(1)
    views[0].block = 7

    def run() -> None:
        with pytest.raises(ValueError, match="closed"):  # closed before its loop was sent the result
            list(scheduler.start(counting(7, 1)))

    running = threading.Thread(target=run, daemon=True)
    running.start()
    assert views[0].entered.wait(WAIT)
    closing = threading.Thread(target=scheduler.close, daemon=True)
    closing.start()
    closing.join(0.3)
    assert closing.is_alive()  # the forward running now ends first
    views[0].release.set()
    closing.join(WAIT)
    running.join(WAIT)
    assert not closing.is_alive() and views[0].ids == [7]


def test_a_dropped_stream_gives_its_sequence_back():
    scheduler, _, _ = fakes(1)
    stream = scheduler.start(counting(1, 5))
    next(stream)
    del stream  # neither exhausted nor closed
    assert list(scheduler.start(counting(9, 2))) == expected(9, 2)
