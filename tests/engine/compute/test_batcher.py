"""river_cpp.engine.compute.batcher: what goes in each batch, with a fake engine (no model):
the requests asked gathered, prompts cut only while shared, steps never cut, requests
that may not share run alone, and one request's error its own. The rounds are run
here as the scheduler runs them (river_cpp.engine.compute.scheduler)."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pytest

from river_cpp.engine.compute.batcher import ForwardRequest, check_chunk, deliver, run_batch, take_batch

EXIT_LAYERS = 7  # what the fake engine says each row ran


class FakeEngine:
    """`run` of a batch: records each batch's rows and exit; each row's logits are its
    ids (one column), the last one's alone for last_only. A batch that holds
    `fail_seq` fails, from batch `fail_from` on."""

    def __init__(self, *, fail_seq: Optional[int] = None, fail_from: int = 0) -> None:
        self.fail_seq = fail_seq
        self.fail_from = fail_from
        self.batches: list[tuple[list[tuple[int, list[int], bool, bool]], object]] = []

    def __call__(self, rows, exit):
        self.batches.append(([(seq, [int(i) for i in ids], last, prompt) for seq, ids, last, prompt in rows], exit))
        if len(self.batches) > self.fail_from and any(seq == self.fail_seq for seq, *_ in rows):
            raise RuntimeError(f"sequence {self.fail_seq} failed")
        return [
            ((ids[-1:] if last else ids).astype(np.float32).reshape(-1, 1), np.full(len(ids), EXIT_LAYERS, np.int32))
            for _, ids, last, _ in rows
        ]

    def rows_of(self, seq: int) -> list[list[int]]:
        """The ids of `seq` in each batch that held it."""
        return [ids for rows, _ in self.batches for s, ids, *_ in rows if s == seq]


def request(seq: int, ids, *, prompt: bool = False, last_only: bool = False, exit=None, batchable: bool = True):
    return ForwardRequest(seq, np.asarray(ids, np.int32), last_only, prompt, exit, batchable)


def rounds(run: FakeEngine, *requests: ForwardRequest, n_batch: int = 512, chunk: int = 64, held: int = 0) -> list:
    """Batches until every request is answered, as the scheduler runs them: each one's
    logits (its ids) or error. `held`: sequences in use beside those asking."""
    pending, outcome = list(requests), {}
    while pending:
        taken, exit = take_batch(pending, n_batch, chunk, shared=len(pending) + held > 1)
        for (r, n), result in zip(taken, run_batch(run, taken, exit)):
            if isinstance(result, BaseException):
                outcome[id(r)] = result
            else:
                deliver(r, n, result)
                if not r.finished:
                    continue
                logits, exit_layers = r.result()
                assert exit_layers.tolist() == [EXIT_LAYERS] * len(r.ids)
                outcome[id(r)] = logits.ravel().tolist()
            pending.remove(r)
    return [outcome[id(r)] for r in requests]


def test_a_batch_gathers_every_request():
    run = FakeEngine()
    assert rounds(run, *[request(seq, [10 + seq]) for seq in range(3)]) == [[10], [11], [12]]
    assert len(run.batches) == 1 and sorted(s for s, *_ in run.batches[0][0]) == [0, 1, 2]
    # one sequence verifies several rows while the others step
    assert rounds(run, request(0, [20, 21, 22]), request(1, [31]), request(2, [32])) == [[20, 21, 22], [31], [32]]
    assert len(run.batches) == 2 and len(run.batches[1][0]) == 3


def test_a_prompt_alone_runs_whole():
    run = FakeEngine()
    ids = list(range(1, 151))
    assert rounds(run, request(0, ids, prompt=True)) == [ids]
    assert run.rows_of(0) == [ids]  # more than a chunk, in one batch
    assert rounds(run, request(0, ids, prompt=True, last_only=True)) == [[150]]


def test_a_prompt_alone_is_cut_at_n_batch_only():
    run = FakeEngine()
    ids = list(range(1, 151))
    assert rounds(run, request(0, ids, prompt=True), n_batch=100) == [ids]
    assert run.rows_of(0) == [ids[:100], ids[100:]]


def test_a_shared_prompt_comes_in_chunks():
    run = FakeEngine()
    ids = list(range(1, 201))
    assert rounds(run, request(0, ids, prompt=True, last_only=True), request(1, [7]), held=1) == [[200], [7]]
    # the first batch: a chunk of the prompt beside the step; then chunks while shared
    assert run.batches[0][0] == [(0, ids[:64], True, True), (1, [7], False, False)]
    pieces = run.rows_of(0)
    assert sum(pieces, []) == ids and all(len(piece) == 64 for piece in pieces[:-1])
    # given back by the other sequence: the prompt's rest goes whole
    run = FakeEngine()
    assert rounds(run, request(0, ids, prompt=True), request(1, [7])) == [ids, [7]]
    assert run.rows_of(0) == [ids[:64], ids[64:]]


def test_a_verify_is_never_cut():
    run = FakeEngine()
    verifies = [request(1, [11, 12, 13, 14, 15]), request(2, [21, 22, 23, 24, 25])]
    assert rounds(run, *verifies, n_batch=8, chunk=8) == [[11, 12, 13, 14, 15], [21, 22, 23, 24, 25]]
    # the second does not fit beside the first (5 + 5 > 8): it waits, whole
    assert [len(rows) for rows, _ in run.batches] == [1, 1]


def test_a_prompt_is_cut_to_fill_a_batch():
    run = FakeEngine()
    verify, prompt = request(1, [11, 12, 13, 14, 15]), request(0, [1, 2, 3, 4, 5, 6], prompt=True)
    assert rounds(run, verify, prompt, n_batch=8, chunk=8, held=1) == [[11, 12, 13, 14, 15], [1, 2, 3, 4, 5, 6]]
    assert [rows for rows, _ in run.batches] == [
        [(1, [11, 12, 13, 14, 15], False, False), (0, [1, 2, 3], False, True)],
        [(0, [4, 5, 6], False, True)],
    ]


@pytest.mark.parametrize(
    "budget, pieces",
    [
        (1, [[1], [2, 3, 4, 5]]),
        (2, [[1, 2], [3, 4, 5]]),
        (4, [[1, 2, 3, 4], [5]]),
    ],
)
def test_a_prompt_takes_what_the_batch_has_left(budget, pieces):
    """A prompt beside a verify gets the rows the batch has left, one or more, and the
    rest later: our own attention gives a prompt's rows the same bits wherever it is cut
    (tests/engine/test_own_attention.py, test_sequences.py on the engine)."""
    run = FakeEngine()
    verify, prompt = request(1, list(range(11, 19 - budget))), request(0, [1, 2, 3, 4, 5], prompt=True)
    assert rounds(run, verify, prompt, n_batch=8, chunk=8, held=1) == [list(range(11, 19 - budget)), [1, 2, 3, 4, 5]]
    assert run.rows_of(0) == pieces


@pytest.mark.parametrize("chunk, n_batch", [(0, 64), (65, 64)])
def test_a_chunk_that_is_empty_or_overflows_a_batch_is_refused(chunk, n_batch):
    with pytest.raises(ValueError, match="chunk must be in"):
        check_chunk(chunk, n_batch)


def test_requests_that_may_not_share_run_alone():
    run = FakeEngine()
    checked, other = object(), object()  # exit configurations
    requests = [
        request(1, [2], exit=checked),  # leads the batch: what may join it?
        request(0, [1], exit=checked, batchable=False),  # an exit decided by a check
        request(2, [3], exit=other),
        request(3, list(range(1, 601)), prompt=True, batchable=False),  # longer than a batch
    ]
    assert rounds(run, *requests) == [[2], [1], [3], list(range(1, 601))]
    assert all(len(rows) == 1 for rows, _ in run.batches)  # no two shared: by the rule or by their exits
    exits = {rows[0][0]: exit for rows, exit in run.batches}
    assert exits == {0: checked, 1: checked, 2: other, 3: None}
    assert run.rows_of(3) == [list(range(1, 601))]  # whole, as the engine cuts it alone


def test_an_error_in_a_shared_batch_is_only_its_requests():
    run = FakeEngine(fail_seq=1)
    outcomes = rounds(run, request(0, [1]), request(1, [2, 3]), request(2, [4, 5, 6], prompt=True))
    assert outcomes[0] == [1] and outcomes[2] == [4, 5, 6]
    assert isinstance(outcomes[1], RuntimeError) and "sequence 1 failed" in str(outcomes[1])
    shared, *alone = run.batches
    assert len(shared[0]) == 3  # the batch failed, then each row ran alone
    assert sorted(rows[0][0] for rows, _ in alone) == [0, 1, 2] and all(len(rows) == 1 for rows, _ in alone)


def test_an_error_in_a_prompts_later_chunk_is_its_own():
    """A prompt fails in its second chunk, which it shares with another sequence's
    step: the prompt gets the error, the step its answer."""
    run = FakeEngine(fail_seq=1, fail_from=1)
    outcomes = rounds(run, request(1, list(range(1, 11)), prompt=True), request(0, [5]), chunk=4, held=1)
    assert outcomes[1] == [5]
    assert isinstance(outcomes[0], RuntimeError) and "sequence 1 failed" in str(outcomes[0])
    assert run.rows_of(1)[:2] == [[1, 2, 3, 4], [5, 6, 7, 8]]
