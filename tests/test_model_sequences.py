"""RiverModel's sequences, leased per generation by its scheduler (river_cpp.engine.compute.scheduler): streams
read in turn on one thread, on the demo model with one sequence or several and with
fewer sequences than streams, with the model's own calls between their chunks, and on
a tiny model on either backbone; each answer is the one it gets alone, to the bits of
its logprobs. close() with streams left open returns at once and ends them; a fault
injected into the scheduler fails the generations pending then, at once, and the
model serves on."""

from __future__ import annotations

import threading
import time
from typing import Iterator

import pytest
from in_turn import read_in_turn

from river_cpp import RiverModel

N_CTX = 512
MAX_TOKENS = 20
WAIT = 10  # seconds close() may take at most with streams left open
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n",
    "Once upon a time, in a land far away,",
]
GREEDY = {"temperature": 0}
SEEDED = {"temperature": 0.8, "seed": 7}


@pytest.fixture(scope="module")
def models(demo_model):
    """RiverModel(demo_model, n_seq_max=n) for each n asked, loaded once (default
    decoding: drafts verified by the backbone)."""
    opened: dict[int, RiverModel] = {}

    def model(n_seq_max: int) -> RiverModel:
        if n_seq_max not in opened:
            opened[n_seq_max] = RiverModel(demo_model, n_seq_max=n_seq_max, n_ctx=N_CTX, n_threads=2, progress=False)
        return opened[n_seq_max]

    yield model
    for model in opened.values():
        model.close()


def chunks_of(stream) -> Iterator[tuple[int, float]]:
    """Each chunk's token and logprob (the bits of its row of logits, in effect)."""
    return ((chunk.token_id, chunk.logprob) for chunk in stream)


def alone(model: RiverModel, prompt: str, **options) -> list[tuple[int, float]]:
    """The answer from an empty sequence, with nothing else running."""
    model.reset()
    return list(chunks_of(model.generate(prompt, stream=True, max_tokens=MAX_TOKENS, logprobs=1, **options)))


@pytest.mark.real_model
@pytest.mark.parametrize("sampling", [GREEDY, SEEDED], ids=["greedy", "seeded"])
@pytest.mark.parametrize("n_seq_max", [1, 4])
def test_two_streams_read_in_turn_on_one_thread_each_answer_as_alone(models, n_seq_max, sampling):
    want = [alone(models(1), prompt, **sampling) for prompt in PROMPTS[:2]]
    model = models(n_seq_max)
    streams = [model.generate(p, stream=True, max_tokens=MAX_TOKENS, logprobs=1, **sampling) for p in PROMPTS[:2]]
    got = read_in_turn([chunks_of(stream) for stream in streams])
    assert got == want
    assert [s.result.token_ids for s in streams] == [[token for token, _ in w] for w in want]


@pytest.mark.real_model
def test_three_streams_on_two_sequences_each_answer_as_alone(models):
    samplings = [GREEDY, SEEDED, GREEDY]
    want = [alone(models(1), p, **s) for p, s in zip(PROMPTS, samplings)]
    model = models(2)
    streams = [
        chunks_of(model.generate(p, stream=True, max_tokens=MAX_TOKENS, logprobs=1, **s))
        for p, s in zip(PROMPTS, samplings)
    ]
    assert read_in_turn(streams) == want


@pytest.mark.real_model
def test_the_models_own_calls_between_a_streams_chunks_leave_its_answer_alone(models):
    """forward, rewind and reset act on sequence 0 (the stream's): it takes it back as it was."""
    model = models(1)
    want = alone(model, PROMPTS[0], **SEEDED)
    stream = chunks_of(model.generate(PROMPTS[0], stream=True, max_tokens=MAX_TOKENS, logprobs=1, **SEEDED))
    got = [next(stream) for _ in range(3)]
    model.forward(model.tokenize(PROMPTS[2]))
    got.append(next(stream))
    model.rewind(2)
    model.reset()
    got.extend(stream)
    assert got == want


@pytest.mark.real_model
@pytest.mark.parametrize("n_seq_max", [1, 2])
def test_close_with_streams_left_open_returns_at_once_and_ends_them(demo_model, n_seq_max):
    model = RiverModel(demo_model, n_seq_max=n_seq_max, n_ctx=N_CTX, n_threads=2, progress=False)
    here = model.generate(PROMPTS[0], stream=True, max_tokens=MAX_TOKENS)
    next(here)  # holds a sequence, never read again nor closed
    elsewhere_going, elsewhere_left = threading.Event(), threading.Event()

    def leave_one_open() -> None:  # another thread's stream, left open too
        stream = model.generate(PROMPTS[1], stream=True, max_tokens=MAX_TOKENS)
        next(stream)
        elsewhere_going.set()
        elsewhere_left.wait(WAIT)
        with pytest.raises(ValueError, match="closed"):
            next(stream)

    elsewhere = threading.Thread(target=leave_one_open, daemon=True)
    if n_seq_max > 1:  # with one sequence it would wait for the stream above
        elsewhere.start()
        assert elsewhere_going.wait(WAIT)
    closing = threading.Thread(target=model.close, daemon=True)
    closing.start()
    closing.join(WAIT)
    assert not closing.is_alive(), "close() waited for a stream nobody reads"
    with pytest.raises(ValueError, match="closed"):
        next(here)
    with pytest.raises(ValueError, match="closed"):
        model.generate(PROMPTS[0], max_tokens=2)
    elsewhere_left.set()
    if n_seq_max > 1:
        elsewhere.join(WAIT)
    model.close()  # again: nothing to do


@pytest.mark.parametrize("engine", ["graph", "llama.cpp"])
def test_streams_read_in_turn_answer_as_alone_on_either_backbone(tiny_llama, engine):
    """The sequence taken over is saved and put back by each backbone's own state
    (K/V as stored on the graph; llama.cpp's sequence state on its context). Plain
    decoding: on F32 matrices (and llama.cpp's kernels) a verify's rows are not a step's
    bits, so drafts, which depend on what the model drafted before, would move them."""
    prompts = [list(range(300, 340)), list(range(700, 730))]
    options = dict(max_tokens=24, logprobs=1, speculative=False, **SEEDED)
    with RiverModel(tiny_llama, engine=engine, river=None, n_ctx=256, n_threads=1, progress=False) as model:
        want = []
        for prompt in prompts:
            model.reset()
            want.append(list(chunks_of(model.generate(prompt, stream=True, **options))))
        streams = [chunks_of(model.generate(prompt, stream=True, **options)) for prompt in prompts]
        assert read_in_turn(streams) == want


@pytest.mark.real_model
def test_a_fault_in_the_scheduler_fails_the_pending_generations_at_once_and_it_serves_on(models, monkeypatch):
    model = models(4)
    want = alone(models(1), PROMPTS[0], **GREEDY)
    compute = model.scheduler._compute
    injected: list[float] = []

    def broken(asking) -> None:
        monkeypatch.setattr(model.scheduler, "_compute", compute)  # once
        injected.append(time.monotonic())
        raise MemoryError("injected into the scheduler")

    outcomes: list = []

    def read(prompt: str) -> None:
        stream = model.generate(prompt, stream=True, max_tokens=MAX_TOKENS, logprobs=1, **GREEDY)
        try:
            outcomes.append(list(chunks_of(stream)))
        except RuntimeError as error:
            outcomes.append((error, time.monotonic()))

    readers = [threading.Thread(target=read, args=(prompt,), daemon=True) for prompt in PROMPTS]
    monkeypatch.setattr(model.scheduler, "_compute", broken)
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(60)
    failed = [outcome for outcome in outcomes if isinstance(outcome, tuple)]
    assert len(outcomes) == len(PROMPTS) and failed
    for error, at in failed:
        assert "scheduler failed" in str(error) and isinstance(error.__cause__, MemoryError)
        assert at - injected[0] < 1.0
    assert alone(model, PROMPTS[0], **GREEDY) == want  # and it serves on
    assert model.scheduler.in_use == 0


@pytest.mark.real_model
@pytest.mark.parametrize("n_seq_max", [1, 4])
def test_a_lone_generation_runs_on_its_callers_thread_and_never_waits(models, n_seq_max):
    """By structure, not timing: no wait on the scheduler's condition (no timer, no
    hand-over to another thread), and no thread started."""
    model = models(n_seq_max)
    scheduler = model.scheduler
    waits: list = []
    real_wait = scheduler._condition.wait
    scheduler._condition.wait = lambda timeout=None: waits.append(timeout) or real_wait(timeout)
    threads = threading.active_count()
    try:
        model.generate(PROMPTS[0], max_tokens=MAX_TOKENS, **GREEDY)
    finally:
        del scheduler._condition.wait
    assert waits == [] and threading.active_count() == threads
