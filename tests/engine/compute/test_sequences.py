"""Several sequences in one model (issue 49): the engine's forward_many computes each
sequence's rows as a forward of that sequence alone computes them, bit for bit, and
refuses what it cannot do with every sequence as it was; RiverModel(n_seq_max=N) runs
generations on several threads at once, each answer the one it gets alone.

The model is a tiny random Q8_0 llama: a type our own products cover (csrc/own_*), so
the matrix products are batch-invariant and identity is promised bit for bit.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

from river_cpp import RiverError, RiverModel, Speculative
from river_cpp.decoding.speculative_stats import SourceStats
from river_cpp.engine import _core
from river_cpp.engine.compute.context import ContextOverflowError
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.engine.compute.prompt_cache import cache_scope
from river_cpp.engine.probes.own_products import own_products

N_CTX = 256
N_BATCH = 64
N_SEQ = 3


def make_engine(path: Path, n_seq: int, *, n_batch: int = N_BATCH, own_attention: bool = True) -> _core.Engine:
    return _core.Engine(
        str(path), N_CTX, n_batch, 1, n_seq=n_seq, own_attention=own_attention, **own_products().engine_arguments()
    )


def ids(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, 5000, n).astype(np.int32)


# ---------------------------------------------------------------- rows as alone

# Batches of rows (seq, ids, last_only, prompt): prompts cut in chunks of different
# sizes beside one-token steps and verifies of several rows, the sequences at different
# lengths. A batch of one row runs as Engine.forward, of several as forward_many.
P0, P1, P2 = ids(40, 0), ids(30, 1), ids(21, 2)
SCRIPT = [
    [(0, P0, False, True)],
    [(1, P1[:17], False, True), (0, ids(1, 10), False, False)],
    [(2, P2[:9], False, True), (1, P1[17:], False, True), (0, ids(4, 11), False, False)],
    [(0, ids(1, 12), False, False), (2, P2[9:], True, True), (1, ids(1, 13), True, False)],
    [(1, ids(5, 14), False, False), (2, ids(1, 15), False, False), (0, ids(3, 16), True, False)],
    [(2, ids(7, 17), False, False), (0, ids(1, 18), False, False)],
]


def run_script(engine: _core.Engine, script) -> list[list[np.ndarray]]:
    out = []
    for batch in script:
        if len(batch) == 1:
            seq, row_ids, last_only, prompt = batch[0]
            out.append([engine.forward(row_ids, last_only, None, prompt, seq)])
        else:
            out.append(engine.forward_many(batch))
    return out


def alone_script(script, seq: int) -> list:
    """Sequence `seq`'s rows of `script` as a script of one-row batches of sequence 0."""
    return [[(0, *row[1:])] for batch in script for row in batch if row[0] == seq]


def alone(path: Path, seq: int, script, *, merge_prompts: bool = False) -> list[np.ndarray]:
    """Sequence `seq`'s rows of `script`, each a forward of a one-sequence engine.
    merge_prompts: consecutive prompt rows run as one forward (the prompt whole), their
    logits cut back into the script's pieces."""
    engine = make_engine(path, 1)
    rows = [batch[0] for batch in alone_script(script, seq)]
    out: list[np.ndarray] = []
    i = 0
    while i < len(rows):
        j = i + 1
        if merge_prompts and rows[i][3]:
            while j < len(rows) and rows[j][3]:
                j += 1
        if j == i + 1:
            out.append(engine.forward(rows[i][1], rows[i][2], None, rows[i][3], 0))
        else:
            logits = engine.forward(np.concatenate([r[1] for r in rows[i:j]]), False, None, True, 0)
            first = 0
            for r in rows[i:j]:
                piece = logits[first : first + len(r[1])]
                out.append(piece[-1:] if r[2] else piece)
                first += len(r[1])
        i = j
    return out


def rows_of(results, script, seq: int) -> list[np.ndarray]:
    return [logits for batch, got in zip(script, results) for row, logits in zip(batch, got) if row[0] == seq]


def test_rows_of_a_batch_equal_each_sequence_alone(q8_llama):
    engine = make_engine(q8_llama, N_SEQ)
    results = run_script(engine, SCRIPT)
    for seq in range(N_SEQ):
        got, want = rows_of(results, SCRIPT, seq), alone(q8_llama, seq, SCRIPT)
        assert len(got) == len(want) >= 3
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape
            assert np.array_equal(g, w), f"sequence {seq}, its forward {i}"
        n = sum(len(row[1]) for batch in SCRIPT for row in batch if row[0] == seq)
        assert engine.seq_n_past(seq) == n


def test_a_prompt_in_chunks_beside_others_equals_it_whole_alone(q8_llama):
    """The batcher cuts a prompt only while it shares batches; alone it runs whole."""
    engine = make_engine(q8_llama, N_SEQ)
    results = run_script(engine, SCRIPT)
    for seq in (1, 2):  # their prompts came in two chunks
        got, want = rows_of(results, SCRIPT, seq), alone(q8_llama, seq, SCRIPT, merge_prompts=True)
        for i, (g, w) in enumerate(zip(got, want)):
            assert np.array_equal(g, w), f"sequence {seq}, its forward {i}"


@pytest.mark.parametrize("n", [N_BATCH + 1, 2 * N_BATCH + 1, N_BATCH + 2])
def test_a_prompt_longer_than_a_batch_equals_it_whole(q8_llama, n):
    """The engine cuts a prompt at n_batch, leaving a last batch of one row or two: with
    our own attention a row alone takes the bits it takes in any batch (with ggml's, a
    row alone is multiplied by the cache in another order, which on this model changes
    its bits: test_ggml_attention_gives_a_lone_prompt_row_other_bits)."""
    prompt = ids(n, 5)
    cut = make_engine(q8_llama, 1).forward(prompt, False, None, True, 0)
    whole = make_engine(q8_llama, 1, n_batch=512).forward(prompt, False, None, True, 0)
    assert np.array_equal(cut, whole)


def test_ggml_attention_gives_a_lone_prompt_row_other_bits(q8_llama):
    """The test above can fail: with ggml's attention (own_attention=False) the last
    batch of one row changes that row's bits, so across prompt cuts identity is our
    attention's."""
    prompt = ids(N_BATCH + 1, 5)
    cut, whole = (
        make_engine(q8_llama, 1, n_batch=n_batch, own_attention=False).forward(prompt, False, None, True, 0)
        for n_batch in (N_BATCH, 512)
    )
    assert np.array_equal(cut[:-1], whole[:-1]) and not np.array_equal(cut[-1], whole[-1])


def test_each_sequence_holds_its_own_cache(q8_llama):
    engine = make_engine(q8_llama, N_SEQ)
    run_script(engine, SCRIPT)
    for seq in range(N_SEQ):
        reference = make_engine(q8_llama, 1)
        run_script(reference, alone_script(SCRIPT, seq))
        n = engine.seq_n_past(seq)
        for layer in range(engine.n_layer):
            k, v = engine.read_kv(layer, 0, n, seq=seq)
            k_alone, v_alone = reference.read_kv(layer, 0, n)
            assert np.array_equal(k, k_alone) and np.array_equal(v, v_alone)


# ---------------------------------------------------------------- what forward_many refuses


@pytest.fixture(scope="module")
def q8_river(q8_llama, tmp_path_factory) -> Path:
    """A Q4_0 river of q8_llama (built once, in a cache folder of this module's)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        with RiverModel(q8_llama, river="q4_0", n_ctx=32, n_threads=1, progress=False) as model:
            return model.backbone.river_path


def make_river_engine(path: Path, river: Path, n_seq: int) -> _core.Engine:
    engine = make_engine(path, n_seq)
    engine.load_river(str(river))
    return engine


def n_pasts(engine: _core.Engine) -> list[int]:
    return [engine.seq_n_past(seq) for seq in range(engine.n_seq)]


REFUSED = [
    ("appears twice", [(0, ids(1, 20), False, False), (1, ids(1, 21), False, False), (0, ids(2, 22), False, False)]),
    ("sequence 3 is not in the KV cache", [(1, ids(1, 20), False, False), (3, ids(1, 21), False, False)]),
    ("sequence -1 is not in the KV cache", [(-1, ids(1, 20), False, False), (0, ids(1, 21), False, False)]),
    ("at most n_batch = 64 tokens, got 65", [(0, ids(40, 20), False, True), (2, ids(25, 21), False, True)]),
    ("context overflow", [(0, ids(1, 20), False, False), (1, ids(N_CTX - 20, 21), False, True)]),
    ("outside the vocabulary", [(2, ids(3, 20), False, False), (1, np.array([1, 49152], np.int32), False, False)]),
    ("at least one token", [(0, ids(1, 20), False, False), (1, np.zeros(0, np.int32), False, False)]),
    ("at least one sequence", []),
]


@pytest.mark.parametrize("message, rows", REFUSED, ids=[m for m, _ in REFUSED])
def test_refused_rows_leave_every_sequence_as_it_was(q8_llama, message, rows):
    engine = make_engine(q8_llama, N_SEQ)
    run_script(engine, SCRIPT[:3])
    before = n_pasts(engine)
    with pytest.raises(RiverError, match=message):
        engine.forward_many(rows)
    assert n_pasts(engine) == before
    # and they go on as they would have: the rest of the script gives the rows alone
    results = run_script(engine, SCRIPT[3:])
    for seq in range(N_SEQ):
        want = alone(q8_llama, seq, SCRIPT)[-len(rows_of(results, SCRIPT[3:], seq)) :]
        assert all(np.array_equal(g, w) for g, w in zip(rows_of(results, SCRIPT[3:], seq), want))


def test_a_forward_of_one_sequence_out_of_range_is_refused(q8_llama):
    engine = make_engine(q8_llama, N_SEQ)
    with pytest.raises(RiverError, match="sequence 3 is not in the KV cache"):
        engine.forward(ids(2, 0), False, None, False, 3)
    engine.forward(ids(2, 0), False, None, False, 0)  # placed: the cache exists
    for call in (lambda: engine.rewind(0, 3), lambda: engine.save_kv(0, 3), lambda: engine.read_kv(0, 0, 1, seq=3)):
        with pytest.raises(RiverError, match="not in the KV cache"):
            call()
    assert n_pasts(engine) == [2, 0, 0]


def test_an_exit_decided_by_a_check_is_refused_in_a_shared_batch(q8_llama, q8_river):
    engine = make_river_engine(q8_llama, q8_river, N_SEQ)
    run_script(engine, SCRIPT[:2])
    before = n_pasts(engine)
    for policy in (ExitPolicy.uniform(0.5, min_layer=1), ExitPolicy.at_layer(1)):
        check = _core.ExitConfig(policy.resolve(engine.n_layer), policy.signal)
        assert engine.decides_by_check(check)
        with pytest.raises(RiverError, match="depend on every sequence"):
            engine.forward_many([(0, ids(1, 30), False, False), (1, ids(1, 31), False, False)], check)
        assert n_pasts(engine) == before
        engine.forward(ids(1, 32), False, check, False, 2)  # alone, it runs
        engine.rewind(before[2], 2)


def test_every_layer_on_the_river_shares_a_batch_as_alone(q8_llama, q8_river):
    """An exit at depth 0 decides nothing by a check: its rows (the river's) batch."""
    on_river = _core.ExitConfig(ExitPolicy.at_layer(0).resolve(3), "cosine")
    engine = make_river_engine(q8_llama, q8_river, N_SEQ)
    assert not engine.decides_by_check(on_river)
    run_script(engine, SCRIPT[:2])
    steps = [(0, ids(2, 40), False, False), (1, ids(1, 41), False, False)]
    got = engine.forward_many(steps, on_river)
    assert list(engine.last_exit_layers) == [0] * 3
    for (seq, row_ids, _, _), logits in zip(steps, got):
        reference = make_river_engine(q8_llama, q8_river, 1)
        run_script(reference, alone_script(SCRIPT[:2], seq))
        assert np.array_equal(logits, reference.forward(row_ids, False, on_river, False, 0))


# ---------------------------------------------------------------- a sequence's state


def test_save_and_load_of_one_sequence(q8_llama):
    engine = make_engine(q8_llama, N_SEQ)
    run_script(engine, SCRIPT[:3])
    n = engine.seq_n_past(1)
    state = engine.save_kv(n, 1)
    header = len(engine.save_kv(0, 1))  # the cache's types
    assert len(state) - header == 2 * 2 * engine.n_layer * n * engine.n_embd_kv  # F16 K and V
    engine.reset(1)
    engine.forward(ids(12, 50), False, None, True, 1)  # other work in its cells
    engine.load_kv(n, state, 1)
    engine.load_kv(n, state, 2)  # into another sequence's cells, as a prompt cache does
    assert n_pasts(engine)[1:] == [n, n]
    rest = SCRIPT[3:]
    results = run_script(engine, rest)
    want = alone(q8_llama, 1, SCRIPT)[-len(rows_of(results, rest, 1)) :]
    assert all(np.array_equal(g, w) for g, w in zip(rows_of(results, rest, 1), want))
    # sequence 2 continues sequence 1's positions with its own rows, as one sequence alone would
    history, tail = alone_script(SCRIPT[:3], 1), alone_script(rest, 2)
    want = [got[0] for got in run_script(make_engine(q8_llama, 1), history + tail)[len(history) :]]
    assert all(np.array_equal(g, w) for g, w in zip(rows_of(results, rest, 2), want))
    # and sequence 0 never noticed
    got = rows_of(results, rest, 0)
    assert all(np.array_equal(g, w) for g, w in zip(got, alone(q8_llama, 0, SCRIPT)[-len(got) :]))


def test_rewinding_one_sequence_leaves_the_others_alone(q8_llama):
    engine = make_engine(q8_llama, N_SEQ)
    run_script(engine, SCRIPT[:3])
    before = n_pasts(engine)
    kv_before = [engine.read_kv(1, 0, n, seq=seq) for seq, n in enumerate(before)]
    engine.rewind(5, 1)
    assert n_pasts(engine) == [before[0], 5, before[2]]
    for seq in (0, 2):
        k, v = engine.read_kv(1, 0, before[seq], seq=seq)
        assert np.array_equal(k, kv_before[seq][0]) and np.array_equal(v, kv_before[seq][1])
    # the rewound one computes its dropped positions again as it did
    dropped = np.concatenate([row[1] for batch in SCRIPT[:3] for row in batch if row[0] == 1])[5:]
    engine.forward(dropped, False, None, True, 1)
    k, v = engine.read_kv(1, 0, before[1], seq=1)
    assert np.array_equal(k, kv_before[1][0]) and np.array_equal(v, kv_before[1][1])
    with pytest.raises(RiverError, match="cannot rewind"):
        engine.rewind(before[2] + 1, 2)
    assert n_pasts(engine) == before


# ---------------------------------------------------------------- generations on threads

WAIT = 60  # seconds before a test gives up on a generation thread
MODEL_N_CTX = 384
# the auto river is none on this Q8_0 file: a river drafts here as it does on releases
MODEL_OPTIONS = {"river": "q4_0", "n_ctx": MODEL_N_CTX, "n_threads": 1, "progress": False}
PROMPTS = [
    "Once upon a time",
    "The quick brown fox jumps over the lazy dog. " * 4,
    "A long document that a prompt brings in chunks: " + "one two three four five six seven eight nine ten. " * 14,
    "def add(a, b):\n    return a + b\n\n" * 3,
    "In a small village by the sea, there lived an old fisherman who",
]
# per prompt: the call's options, greedy and seeded, of different lengths
OPTIONS = [
    {"max_tokens": 40, "temperature": 0},
    {"max_tokens": 24, "temperature": 0.8, "seed": 3},
    {"max_tokens": 32, "temperature": 0},
    {"max_tokens": 48, "temperature": 0.8, "seed": 11},
    {"max_tokens": 16, "temperature": 0},
]


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module")
def multi(q8_llama, model_cache) -> RiverModel:
    """Three sequences, a Q4_0 river, the default decoding (drafts verified by the backbone)."""
    with RiverModel(q8_llama, n_seq_max=N_SEQ, **MODEL_OPTIONS) as model:
        assert model.n_seq_max == N_SEQ and model.has_river
        yield model


@pytest.fixture(scope="module")
def single(q8_llama, model_cache) -> RiverModel:
    """The same model with one sequence: each request served alone."""
    with RiverModel(q8_llama, **MODEL_OPTIONS) as model:
        yield model


def served_alone(model: RiverModel, prompt, **options):
    model.reset()
    return model.generate(prompt, **options)


def tokens_and_logprobs(model: RiverModel, prompt, *, alone: bool = False, **options) -> tuple[list, int]:
    """Each chunk's token and logprob (the bits of its row of logits, in effect) and the
    prompt positions taken from the cache; `alone`: from a fresh sequence."""
    if alone:
        model.reset()
    stream = model.generate(prompt, stream=True, logprobs=1, **options)
    chunks = [(chunk.token_id, chunk.logprob) for chunk in stream]
    return chunks, stream.result.cached_tokens


class Generation(threading.Thread):
    """One generate(stream=True) on its own thread: waits for `after` before it
    starts, sets `going` once it has its `going_after`-th chunk, keeps each chunk's
    token and logprob (None without the logprobs option), its result or its error."""

    def __init__(self, model, prompt, *, after=None, going_after: int = 2, barrier=None, **options) -> None:
        super().__init__(daemon=True)
        self.model, self.prompt, self.options = model, prompt, options
        self.after, self.going_after, self.barrier = after, going_after, barrier
        self.going = threading.Event()
        self.chunks: list[tuple[int, Optional[float]]] = []
        self.result = None
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            if self.after is not None and not self.after.wait(WAIT):
                raise TimeoutError("the generation before this one never got going")
            stream = self.model.generate(self.prompt, stream=True, **self.options)
            for i, chunk in enumerate(stream, 1):
                self.chunks.append((chunk.token_id, chunk.logprob))
                if i == self.going_after:
                    self.going.set()
                    if self.barrier is not None:
                        self.barrier.wait(WAIT)
            self.result = stream.result
        except BaseException as error:  # noqa: BLE001 - the test thread raises it
            self.error = error
        finally:
            self.going.set()

    def finish(self, wait: float = WAIT):
        self.join(wait)
        assert not self.is_alive(), "a generation stalled"
        if self.error is not None:
            raise self.error
        return self.result


def test_generations_on_threads_equal_each_served_alone(multi, single):
    """Started at different times, with different prompts and lengths, greedy and
    seeded, drafts on: each answer is the one the model gives it alone, to the bits of
    its logprobs."""
    threads: list[Generation] = []
    for prompt, options in zip(PROMPTS, OPTIONS):  # each starts once the one before is under way
        after = threads[-1].going if threads else None
        threads.append(Generation(multi, prompt, after=after, logprobs=1, **options))
    for thread in threads:
        thread.start()
    results = [thread.finish() for thread in threads]
    for prompt, options, thread in zip(PROMPTS, OPTIONS, threads):
        want, _ = tokens_and_logprobs(single, prompt, alone=True, **options)
        assert thread.chunks == want, (prompt, options)
        assert thread.result.token_ids == [token for token, _ in want]
    assert sum(r.speculative.drafted for r in results) > 0  # verifies of several rows ran
    assert multi.scheduler.shared_batches > 0  # and sequences shared batches


MORE_PROMPTS = [
    "Twinkle, twinkle, little star, how I wonder",
    "import numpy as np\n\ndef mean(xs):\n",
    "The weather today is",
]


def test_eight_threads_on_four_sequences_equal_each_served_alone(q8_llama, model_cache, single):
    """Twice as many generations as sequences, started at once: half wait for a
    sequence, and each answer is still the one it gets alone."""
    with RiverModel(q8_llama, n_seq_max=4, **MODEL_OPTIONS) as model:
        prompts = PROMPTS + MORE_PROMPTS
        options = [OPTIONS[i % len(OPTIONS)] for i in range(len(prompts))]
        threads = [Generation(model, p, logprobs=1, **o) for p, o in zip(prompts, options)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.finish()
    for prompt, option, thread in zip(prompts, options, threads):
        want, _ = tokens_and_logprobs(single, prompt, alone=True, **option)
        assert thread.chunks == want, (prompt, option)


def test_a_request_that_reuses_a_held_prefix_answers_as_alone(multi, single):
    """A sequence that holds a prefix of the prompt (its own earlier request) computes
    only the rest: the answer, to the bits of its logprobs, is the one from nothing."""
    base = multi.tokenize(PROMPTS[2])
    beside = Generation(multi, PROMPTS[3], going_after=1, max_tokens=48, temperature=0.8, seed=5)
    beside.start()  # shares batches with the requests below while it lasts
    assert beside.going.wait(WAIT)
    first = multi.generate(base, max_tokens=8, temperature=0)
    longer = base + first.token_ids + multi.tokenize(" and then", add_bos=False)
    for prompt in (base, longer, base[:-3], longer):
        got, cached = tokens_and_logprobs(multi, prompt, max_tokens=8, temperature=0)
        want, _ = tokens_and_logprobs(single, prompt, alone=True, max_tokens=8, temperature=0)
        assert cached > 0
        assert got == want
    beside.finish()


def hold_every_sequence(model: RiverModel, prompt: str = PROMPTS[0], *, wait: float = WAIT) -> list:
    """Run n_seq_max generations that all hold their sequence at once (a barrier after
    their second token); their results. Raises if one could not get a sequence within
    `wait` seconds."""
    barrier = threading.Barrier(model.n_seq_max, timeout=wait)
    threads = [
        Generation(model, prompt, barrier=barrier, max_tokens=6 + i, temperature=0) for i in range(model.n_seq_max)
    ]
    for thread in threads:
        thread.start()
    return [thread.finish(wait) for thread in threads]


def test_a_closed_stream_gives_its_sequence_back(multi, single):
    stream = multi.generate(PROMPTS[1], stream=True, max_tokens=100, temperature=0)
    for _ in range(3):
        next(stream)
    stream.close()
    results = hold_every_sequence(multi)
    want = [served_alone(single, PROMPTS[0], max_tokens=6 + i, temperature=0) for i in range(N_SEQ)]
    assert [r.token_ids for r in results] == [w.token_ids for w in want]


def test_a_stream_closed_before_its_first_token_gives_its_sequence_back(q8_llama, model_cache):
    # a model of its own: the sequences this leaks must not stall the other tests
    with RiverModel(q8_llama, n_seq_max=2, n_ctx=64, n_threads=1, river=None, progress=False) as model:
        for _ in range(model.n_seq_max):
            model.generate(PROMPTS[0], stream=True, max_tokens=4).close()
        hold_every_sequence(model, wait=5)


def test_a_context_overflow_is_an_error_and_stalls_nobody(multi, single):
    running = Generation(multi, PROMPTS[2], going_after=3, max_tokens=40, temperature=0)
    running.start()
    assert running.going.wait(WAIT)
    too_long = list(range(1, MODEL_N_CTX + 2))
    with pytest.raises(ContextOverflowError):
        multi.generate(too_long, max_tokens=4)
    with pytest.raises(ContextOverflowError):
        multi.generate(too_long, stream=True, max_tokens=4)
    assert running.finish().token_ids == served_alone(single, PROMPTS[2], max_tokens=40, temperature=0).token_ids
    hold_every_sequence(multi)


def test_the_prompt_caches_scopes_hold_under_concurrency(q8_llama, model_cache):
    """A sequence filled under scope A is forgotten before scope B takes it; A's next
    request reuses its own. The prompt cache's entries keep to their scope too."""
    prompt = PROMPTS[1]
    with RiverModel(q8_llama, n_seq_max=2, n_ctx=MODEL_N_CTX, n_threads=1, river=None, prompt_cache=True) as model:

        def in_scope(scope: str, barrier) -> Generation:
            class Scoped(Generation):
                def run(self) -> None:
                    with cache_scope(scope):
                        super().run()

            return Scoped(model, prompt, barrier=barrier, max_tokens=8, temperature=0)

        # both sequences filled under A at once
        barrier = threading.Barrier(2, timeout=WAIT)
        first = [in_scope("A", barrier) for _ in range(2)]
        for thread in first:
            thread.start()
        assert all(thread.finish().cached_tokens == 0 for thread in first)
        # then B and A at once: B takes one of A's sequences, A the other
        barrier = threading.Barrier(2, timeout=WAIT)
        b, a = in_scope("B", barrier), in_scope("A", barrier)
        b.start()
        a.start()
        b_result, a_result = b.finish(), a.finish()
        assert b_result.cached_tokens == 0
        assert a_result.cached_tokens > 0
        assert b_result.token_ids == a_result.token_ids == first[0].result.token_ids


def test_llama_cpps_backbone_serves_one_sequence_at_a_time(tiny_llama):
    with pytest.warns(RuntimeWarning, match="one sequence at a time"):
        model = RiverModel(tiny_llama, engine="llama.cpp", n_seq_max=2, n_ctx=128, n_threads=1, progress=False)
    with model:
        assert model.n_seq_max == 1
        threads = [Generation(model, prompt, max_tokens=8, temperature=0) for prompt in PROMPTS[:2]]
        for thread in threads:
            thread.start()
        results = [thread.finish() for thread in threads]
        for prompt, result in zip(PROMPTS, results):
            assert result.token_ids == served_alone(model, prompt, max_tokens=8, temperature=0).token_ids


def test_a_sequence_drafts_from_the_river_only_while_it_runs_alone(multi):
    """While other sequences are in use their rows fill each batch, so the loop offers
    only free drafts; alone, the river drafts as on a one-sequence model."""
    river_every_round = Speculative(draft="river", adaptive=False, max_draft=3, memory=False)

    def river_rounds() -> int:
        result = multi.generate(PROMPTS[0], max_tokens=12, temperature=0, speculative=river_every_round)
        return result.speculative.by_source.get("river", SourceStats()).rounds

    assert river_rounds() > 0
    other = multi.generate(PROMPTS[1], stream=True, max_tokens=40, temperature=0)
    next(other)  # another generation holds a sequence
    try:
        assert river_rounds() == 0
    finally:
        other.close()
