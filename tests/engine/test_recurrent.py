"""The llama.cpp backbone on llama.cpp's recurrent memory (mamba, rwkv6) and hybrid memory
(granitehybrid), on tiny random files (tests/recurrent_archs.py): a rewind restores the
state saved before the last verify (or starts again) and runs the kept positions again,
so that rejected drafts, a repeated prompt, a chat's next turn and the prompt cache give
llama.cpp's own greedy tokens."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from foreign_archs import write_foreign_gguf
from llama_run import llama_cpp_greedy
from recurrent_archs import ARCHITECTURES, write_recurrent_gguf

from river_cpp import Llama, RiverModel, Speculative
from river_cpp.engine.compute import llama_backbone
from river_cpp.engine.compute.llama_backbone import HYBRID, RECURRENT, probe_llama_cpp

# Text that repeats itself, so that n-gram drafts have something to copy.
GROUNDED = (
    "Rewrite the list. List: apples, pears, plums, cherries, apples, pears, plums, cherries. Rewritten: apples, pears,"
)
MEMORY = {"mamba": RECURRENT, "rwkv6": RECURRENT, "granitehybrid": HYBRID}


@pytest.fixture(scope="module", params=ARCHITECTURES)
def recurrent_gguf(request, tmp_path_factory, tokenizer_fields) -> Path:
    folder = tmp_path_factory.mktemp("recurrent")
    return write_recurrent_gguf(folder / f"tiny_{request.param}.gguf", request.param, tokenizer_fields, seed=3)


@pytest.fixture(scope="module")
def recurrent_model(recurrent_gguf: Path) -> RiverModel:
    with RiverModel(recurrent_gguf, n_ctx=512, n_threads=2) as model:
        yield model


@pytest.fixture(scope="module")
def wrong_draft(tmp_path_factory, tokenizer_fields) -> RiverModel:
    """Another tiny model with the same vocabulary, whose drafts the recurrent ones reject."""
    path = write_foreign_gguf(tmp_path_factory.mktemp("draft") / "draft.gguf", "llama", tokenizer_fields, seed=11)
    with RiverModel(path, n_ctx=512, n_threads=2) as model:
        yield model


@pytest.fixture
def restores(monkeypatch) -> list[int]:
    """The positions saved states were restored at, from here on."""
    seen: list[int] = []
    restore = llama_backbone._Snapshot.restore

    def counted(snapshot, ctx):
        seen.append(snapshot.n_past)
        return restore(snapshot, ctx)

    monkeypatch.setattr(llama_backbone._Snapshot, "restore", counted)
    return seen


def test_memory_kind(recurrent_model, recurrent_gguf):
    arch = recurrent_model.backbone_choice.arch
    assert recurrent_model.backbone_choice.kind == "llama.cpp"
    assert recurrent_model.backbone.memory == MEMORY[arch] == probe_llama_cpp(recurrent_gguf)


def test_rewind_gives_a_cold_forward_logits(recurrent_model, restores):
    """Cut back inside the last verify (to the saved state), then below it (from the
    start): the next positions' logits are a cold run's."""
    backbone = recurrent_model.backbone
    rng = np.random.default_rng(0)
    ids = rng.integers(100, 40000, 40).tolist()
    backbone.reset()
    backbone.forward(ids[:20], last_only=True)
    backbone.forward(ids[20:30])  # a verify of 10: the state at 20 is saved
    assert backbone.cached_prefix(ids[:24] + [1]) == 20 and backbone.cached_prefix(ids[:30] + [1]) == 30
    backbone.rewind(23)
    assert restores == [20] and backbone.n_past == 23 and backbone.cached_ids == ids[:23]
    after_cut = backbone.forward(ids[23:40])
    backbone.rewind(10)  # below the saved state (now at 23): from the start
    assert restores == [20] and backbone.n_past == 10
    again = backbone.forward(ids[10:40])
    backbone.reset()
    cold = backbone.forward(ids)
    np.testing.assert_allclose(after_cut, cold[23:], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(again, cold[10:], rtol=1e-4, atol=1e-4)


def test_rejected_drafts_give_llama_cpp_tokens(recurrent_model, recurrent_gguf, wrong_draft, restores):
    """Another model's drafts, drafted every round, are rejected in every round: each
    rejection restores the state saved before its verify. The default (drafts from
    n-grams and the memory) and plain decoding give the same tokens."""
    ids = recurrent_model.tokenize(GROUNDED)
    plain = recurrent_model.generate(ids, max_tokens=32, temperature=0, speculative=False)
    forced = Speculative(draft=wrong_draft.backbone, max_draft=4, adaptive=False)
    rejected = recurrent_model.generate(ids, max_tokens=32, temperature=0, speculative=forced)
    assert rejected.speculative.drafted > rejected.speculative.accepted and len(restores) > 0
    default = recurrent_model.generate(ids, max_tokens=32, temperature=0)
    assert len(set(plain.token_ids)) > 1
    assert rejected.token_ids == default.token_ids == plain.token_ids
    assert plain.token_ids == llama_cpp_greedy(recurrent_gguf, ids, len(plain.token_ids))


def test_sampled_drafts_equal_plain(recurrent_model):
    """Sampling with a seed: the memory's greedy answer drafted, kept in part, as plain sampling."""
    ids = recurrent_model.tokenize(GROUNDED)
    recurrent_model.generate(ids, max_tokens=32, temperature=0)
    for seed in (1, 2, 3):
        plain = recurrent_model.generate(ids, max_tokens=32, temperature=0.6, seed=seed, speculative=False)
        drafted = recurrent_model.generate(ids, max_tokens=32, temperature=0.6, seed=seed)
        assert drafted.token_ids == plain.token_ids


def test_repeated_and_extended_prompts(recurrent_model, recurrent_gguf):
    """The same prompt again (the cache cut back inside it) and a prompt that continues
    the cached sequence whole (reused as it is)."""
    ids = recurrent_model.tokenize("The history of the river")
    first = recurrent_model.generate(ids, max_tokens=16, temperature=0)
    # inside the cached sequence, past any saved state: computed again, not claimed as reused
    assert recurrent_model.cached_prefix(ids) < len(ids) - 1
    again = recurrent_model.generate(ids, max_tokens=16, temperature=0)
    assert again.token_ids == first.token_ids == llama_cpp_greedy(recurrent_gguf, ids, 16)
    longer = ids + first.token_ids + recurrent_model.tokenize(" and the sea", add_bos=False)
    held = recurrent_model.n_past
    assert held >= len(ids) + len(first.token_ids) - 1 and recurrent_model.cached_prefix(longer) == held
    extended = recurrent_model.generate(longer, max_tokens=16, temperature=0)
    assert extended.token_ids == llama_cpp_greedy(recurrent_gguf, longer, 16)


def test_chat_second_turn(recurrent_gguf):
    """A chat's second turn on the model that answered the first gives a cold model's answer."""
    turns = [{"role": "user", "content": "Name three rivers."}]
    options = dict(n_ctx=512, n_threads=2, verbose=False)
    warm = Llama(model_path=str(recurrent_gguf), **options)
    cold = Llama(model_path=str(recurrent_gguf), **options)
    try:
        first = warm.create_chat_completion(turns, max_tokens=12, temperature=0)["choices"][0]["message"]
        turns += [first, {"role": "user", "content": "And three seas?"}]
        second = warm.create_chat_completion(turns, max_tokens=12, temperature=0)["choices"][0]["message"]
        assert second == cold.create_chat_completion(turns, max_tokens=12, temperature=0)["choices"][0]["message"]
    finally:
        warm.close()
        cold.close()


def test_prompt_cache(recurrent_gguf):
    """A prompt cache restores a whole earlier sequence that a prompt continues."""
    with RiverModel(recurrent_gguf, n_ctx=512, n_threads=2, prompt_cache=True) as model:
        a = model.tokenize(GROUNDED)
        answer = model.generate(a, max_tokens=16, temperature=0).token_ids
        model.generate(model.tokenize("Something else entirely, to replace the cache."), max_tokens=8)
        longer = a + answer + model.tokenize(" Once more:", add_bos=False)
        reused = model.generate(longer, max_tokens=16, temperature=0)
        assert model.prompt_cache.hits == 1
        assert reused.token_ids == llama_cpp_greedy(recurrent_gguf, longer, 16)


@pytest.mark.slow
def test_mixed_calls_do_not_crash(recurrent_model, wrong_draft):
    """200 calls of every kind in a random order, each as plain decoding gives it."""
    rng = random.Random(0)
    prompts = [recurrent_model.tokenize(text) for text in (GROUNDED, "The history of the river", "a b a b a b a")]
    forced = Speculative(draft=wrong_draft.backbone, max_draft=3, adaptive=False)
    for _ in range(200):
        ids = rng.choice(prompts)
        if rng.random() < 0.3:  # a prompt that continues, or departs from, the last one
            ids = ids + rng.choice(prompts)[1 : rng.randint(2, 6)]
        n = rng.randint(1, 12)
        temperature, seed = rng.choice([(0, None), (0.7, rng.randint(0, 99))])
        speculative = rng.choice([None, forced, False])
        out = recurrent_model.generate(ids, max_tokens=n, temperature=temperature, seed=seed, speculative=speculative)
        if rng.random() < 0.2:
            plain = recurrent_model.generate(ids, max_tokens=n, temperature=temperature, seed=seed, speculative=False)
            assert out.token_ids == plain.token_ids
