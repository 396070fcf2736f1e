"""river_cpp.engine.batcher: what the batcher's thread puts in each batch, with a fake
engine (no model): the sequences in use gathered, prompts cut only while shared, steps
never cut, requests that may not share run alone, one request's error its own, and a
closed batcher refuses."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from typing import Optional

import numpy as np
import pytest

from river_cpp.engine.batcher import ForwardBatcher, ForwardRequest

WAIT = 30  # seconds before a test gives up on the batcher's thread
EXIT_LAYERS = 7  # what the fake engine says each row ran


class FakeEngine:
    """`run` of a ForwardBatcher: records each batch's rows and exit; each row's logits
    are its ids (one column), the last one's alone for last_only. A batch that holds
    `fail_seq` fails."""

    def __init__(self, *, fail_seq: Optional[int] = None) -> None:
        self.fail_seq = fail_seq
        self.batches: list[tuple[list[tuple[int, list[int], bool, bool]], object]] = []

    def __call__(self, rows, exit):
        self.batches.append(([(seq, [int(i) for i in ids], last, prompt) for seq, ids, last, prompt in rows], exit))
        if any(seq == self.fail_seq for seq, *_ in rows):
            raise RuntimeError(f"sequence {self.fail_seq} failed")
        return [
            ((ids[-1:] if last else ids).astype(np.float32).reshape(-1, 1), np.full(len(ids), EXIT_LAYERS, np.int32))
            for _, ids, last, _ in rows
        ]

    def rows_of(self, seq: int) -> list[list[int]]:
        """The ids of `seq` in each batch that held it."""
        return [ids for rows, _ in self.batches for s, ids, *_ in rows if s == seq]


@pytest.fixture
def pool():
    with ThreadPoolExecutor(max_workers=4) as executor:
        yield executor


def make(run: FakeEngine, *, n_batch: int = 512, chunk: int = 64, in_use: int = 1) -> ForwardBatcher:
    """A batcher whose batches wait (up to WAIT) for all `in_use` sequences to ask: what
    a batch holds does not depend on when the threads get there."""
    batcher = ForwardBatcher(run, n_batch, chunk=chunk, wait_s=WAIT)
    batcher.hold(in_use)
    return batcher


def request(seq: int, ids, *, prompt: bool = False, last_only: bool = False, exit=None, batchable: bool = True):
    return ForwardRequest(seq, np.asarray(ids, np.int32), last_only, prompt, exit, batchable)


def ask(pool, batcher: ForwardBatcher, *requests: ForwardRequest) -> list[Future]:
    """Each request's forward on a thread of its own; their futures."""
    return [pool.submit(batcher.forward, r) for r in requests]


def queue_in_order(pool, batcher: ForwardBatcher, *requests: ForwardRequest) -> list[Future]:
    """As ask, each request queued before the next is asked (the batcher's queue
    peeked at: which request leads a batch decides what it may take)."""
    futures = []
    for request in requests:
        futures.append(pool.submit(batcher.forward, request))
        deadline = time.monotonic() + WAIT
        while request not in batcher._pending and not request.finished.is_set():
            assert time.monotonic() < deadline, "a request never reached the queue"
            time.sleep(0.001)
    return futures


def settle(batcher: ForwardBatcher, futures: list[Future]) -> list:
    """Each future's logits (ids) or error, giving its sequence back as it ends (as a
    generation does), so that the batches after it wait for the others only."""
    for future in as_completed(futures, timeout=WAIT):
        future.exception()
        batcher.hold(-1)
    return [f.exception() or f.result()[0].ravel().tolist() for f in futures]


def test_a_batch_gathers_every_sequence_in_use(pool):
    run = FakeEngine()
    batcher = make(run, in_use=3)  # a batch waits (up to WAIT) for all three to ask
    try:
        steps = [request(seq, [10 + seq]) for seq in range(3)]
        verify = request(0, [20, 21, 22])
        futures = ask(pool, batcher, *steps)
        for seq, future in enumerate(futures):
            logits, exit_layers = future.result(WAIT)
            assert logits.ravel().tolist() == [10 + seq] and exit_layers.tolist() == [EXIT_LAYERS]
        assert len(run.batches) == 1 and sorted(s for s, *_ in run.batches[0][0]) == [0, 1, 2]
        # the next round: one sequence verifies several rows while the others step
        futures = ask(pool, batcher, verify, request(1, [31]), request(2, [32]))
        assert futures[0].result(WAIT)[0].ravel().tolist() == [20, 21, 22]
        assert all(f.result(WAIT)[0].shape == (1, 1) for f in futures[1:])
        assert len(run.batches) == 2 and len(run.batches[1][0]) == 3
        assert batcher.batches == batcher.shared_batches == 2
    finally:
        batcher.close()


def test_a_prompt_alone_runs_whole(pool):
    run = FakeEngine()
    batcher = make(run)
    try:
        ids = list(range(1, 151))
        logits, exit_layers = batcher.forward(request(0, ids, prompt=True))
        assert run.rows_of(0) == [ids]  # more than a chunk, in one batch
        assert logits.ravel().tolist() == ids and exit_layers.tolist() == [EXIT_LAYERS] * 150
        last, _ = batcher.forward(request(0, ids, prompt=True, last_only=True))
        assert last.ravel().tolist() == [150]
        assert batcher.shared_batches == 0
    finally:
        batcher.close()


def test_a_prompt_alone_is_cut_at_n_batch_only():
    run = FakeEngine()
    batcher = make(run, n_batch=100)
    try:
        ids = list(range(1, 151))
        logits, exit_layers = batcher.forward(request(0, ids, prompt=True))
        assert run.rows_of(0) == [ids[:100], ids[100:]]
        assert logits.ravel().tolist() == ids and len(exit_layers) == 150
    finally:
        batcher.close()


def test_a_shared_prompt_comes_in_chunks_and_whole_once_alone(pool):
    run = FakeEngine()
    batcher = make(run, chunk=64, in_use=2)
    try:
        ids = list(range(1, 201))
        prompt, step = queue_in_order(pool, batcher, request(0, ids, prompt=True, last_only=True), request(1, [7]))
        assert step.result(WAIT)[0].ravel().tolist() == [7]
        # the first batch: a chunk of the prompt beside the step
        assert run.batches[0][0] == [(0, ids[:64], True, True), (1, [7], False, False)]
        batcher.hold(-1)  # sequence 1 is given back: the prompt is alone
        logits, exit_layers = prompt.result(WAIT)
        assert logits.ravel().tolist() == [200] and len(exit_layers) == 200
        pieces = run.rows_of(0)
        assert sum(pieces, []) == ids
        assert all(len(piece) == 64 for piece in pieces[:-1])  # chunks while shared ...
        assert len(pieces[-1]) == 200 - 64 * (len(pieces) - 1)  # ... then the rest whole
    finally:
        batcher.close()


def test_a_verify_is_never_cut(pool):
    run = FakeEngine()
    batcher = make(run, n_batch=8, chunk=8, in_use=2)
    try:
        verifies = [request(1, [11, 12, 13, 14, 15]), request(2, [21, 22, 23, 24, 25])]
        assert settle(batcher, ask(pool, batcher, *verifies)) == [[11, 12, 13, 14, 15], [21, 22, 23, 24, 25]]
        # the second does not fit beside the first (5 + 5 > 8): it waits, whole
        assert [len(rows) for rows, _ in run.batches] == [1, 1]
        assert run.rows_of(1) == [[11, 12, 13, 14, 15]] and run.rows_of(2) == [[21, 22, 23, 24, 25]]
    finally:
        batcher.close()


def test_a_prompt_is_cut_to_fill_a_batch(pool):
    run = FakeEngine()
    batcher = make(run, n_batch=8, chunk=8, in_use=2)
    try:
        verify, prompt = request(1, [11, 12, 13, 14, 15]), request(0, [1, 2, 3, 4, 5, 6], prompt=True)
        outcomes = settle(batcher, queue_in_order(pool, batcher, verify, prompt))
        assert outcomes == [[11, 12, 13, 14, 15], [1, 2, 3, 4, 5, 6]]
        assert [rows for rows, _ in run.batches] == [
            [(1, [11, 12, 13, 14, 15], False, False), (0, [1, 2, 3], False, True)],
            [(0, [4, 5, 6], False, True)],
        ]
    finally:
        batcher.close()


@pytest.mark.parametrize(
    "budget, pieces",
    [
        (1, [[1], [2, 3, 4, 5]]),
        (2, [[1, 2], [3, 4, 5]]),
        (4, [[1, 2, 3, 4], [5]]),
    ],
)
def test_a_prompt_takes_what_the_batch_has_left(pool, budget, pieces):
    """A prompt beside a verify gets the rows the batch has left, one or more, and the
    rest later: our own attention gives a prompt's rows the same bits wherever it is cut
    (tests/engine/test_own_attention.py, test_sequences.py on the engine)."""
    run = FakeEngine()
    batcher = make(run, n_batch=8, chunk=8, in_use=2)
    try:
        verify, prompt = request(1, list(range(11, 19 - budget))), request(0, [1, 2, 3, 4, 5], prompt=True)
        outcomes = settle(batcher, queue_in_order(pool, batcher, verify, prompt))
        assert outcomes == [list(range(11, 19 - budget)), [1, 2, 3, 4, 5]]
        assert run.rows_of(0) == pieces
    finally:
        batcher.close()


@pytest.mark.parametrize("chunk, n_batch", [(0, 64), (65, 64)])
def test_a_chunk_that_is_empty_or_overflows_a_batch_is_refused(chunk, n_batch):
    with pytest.raises(ValueError, match="chunk must be in"):
        ForwardBatcher(FakeEngine(), n_batch, chunk=chunk)


def test_requests_that_may_not_share_run_alone(pool):
    run = FakeEngine()
    batcher = make(run, in_use=4)
    checked, other = object(), object()  # exit configurations
    try:
        requests = [
            request(1, [2], exit=checked),  # leads the batch: what may join it?
            request(0, [1], exit=checked, batchable=False),  # an exit decided by a check
            request(2, [3], exit=other),
            request(3, list(range(1, 601)), prompt=True, batchable=False),  # longer than a batch
        ]
        assert settle(batcher, queue_in_order(pool, batcher, *requests)) == [[2], [1], [3], list(range(1, 601))]
        assert all(len(rows) == 1 for rows, _ in run.batches)  # no two shared: by the rule or by their exits
        exits = {rows[0][0]: exit for rows, exit in run.batches}
        assert exits == {0: checked, 1: checked, 2: other, 3: None}
        assert run.rows_of(3) == [list(range(1, 601))]  # whole, as the engine cuts it alone
    finally:
        batcher.close()


def test_an_error_in_a_shared_batch_is_only_its_requests(pool):
    run = FakeEngine(fail_seq=1)
    batcher = make(run, in_use=3)
    try:
        futures = ask(pool, batcher, request(0, [1]), request(1, [2, 3]), request(2, [4, 5, 6], prompt=True))
        outcomes = settle(batcher, futures)
        assert outcomes[0] == [1] and outcomes[2] == [4, 5, 6]
        assert isinstance(outcomes[1], RuntimeError) and "sequence 1 failed" in str(outcomes[1])
        shared, *alone = run.batches
        assert len(shared[0]) == 3  # the batch failed, then each row ran alone
        assert sorted(rows[0][0] for rows, _ in alone) == [0, 1, 2] and all(len(rows) == 1 for rows, _ in alone)
        batcher.hold(1)
        assert batcher.forward(request(0, [9]))[0].ravel().tolist() == [9]  # and the batcher goes on
    finally:
        batcher.close()


def test_an_error_in_a_prompts_later_chunk_reaches_its_caller_only(pool):
    """A prompt fails in its second chunk, which it shares with another sequence's
    step: its caller gets the error, the step its answer."""
    run = FakeEngine()
    batcher = make(run, chunk=4, in_use=3)
    try:
        prompt, *steps = ask(
            pool, batcher, request(1, list(range(1, 11)), prompt=True), request(0, [5]), request(2, [7])
        )
        assert [f.result(WAIT)[0].ravel().tolist() for f in steps] == [[5], [7]]
        run.fail_seq = 1  # from the second batch on
        batcher.hold(-1)  # sequence 2 is done; 0 asks again
        step = ask(pool, batcher, request(0, [6]))[0]
        assert step.result(WAIT)[0].ravel().tolist() == [6]
        with pytest.raises(RuntimeError, match="sequence 1 failed"):
            prompt.result(WAIT)
        assert run.rows_of(1)[:2] == [[1, 2, 3, 4], [5, 6, 7, 8]]
        assert [len(rows) for rows, _ in run.batches] == [3, 2, 1, 1]  # shared, shared and failed, then alone
    finally:
        batcher.close()


def test_a_closed_batcher_refuses_forwards():
    run = FakeEngine()
    batcher = make(run)
    assert batcher.forward(request(0, [1]))[0].ravel().tolist() == [1]
    batcher.close()
    with pytest.raises(ValueError, match="closed"):
        batcher.forward(request(0, [2]))
    assert len(run.batches) == 1
    batcher.close()  # again: nothing to do


def broken(*args, **kwargs):
    raise MemoryError("the batcher's own bookkeeping failed")


@pytest.mark.parametrize("where", ["_compute", "_deliver"])
def test_a_failure_of_the_batchers_thread_fails_every_request_at_once(pool, monkeypatch, where):
    """The thread fails outside a request's run (before the batch runs, or delivering
    its results): the requests of that batch and every later one end with an error,
    within a second, instead of waiting for a thread that is gone."""
    run = FakeEngine()
    batcher = make(run, in_use=2)
    try:
        monkeypatch.setattr(batcher, where, broken)  # the thread looks it up for each batch
        asked = time.monotonic()
        futures = ask(pool, batcher, request(0, [1]), request(1, [2]))
        for future in futures:
            with pytest.raises(RuntimeError, match="batcher's thread failed") as failed:
                future.result(WAIT)
            assert isinstance(failed.value.__cause__, MemoryError)
        assert time.monotonic() - asked < 1.0
        with pytest.raises(RuntimeError, match="batcher's thread failed"):
            batcher.forward(request(0, [3]))
    finally:
        batcher.close()
