"""river_cpp.decoding.draft_memory: the model's memory of earlier calls. Documents are
found, evicted least recently used first, a chat's next turn replaces the previous
one, and each model object has its own memory."""

from __future__ import annotations

import gc
import weakref

import pytest

from river_cpp.decoding.draft_memory import DraftMemory, memory_of


def test_a_later_call_drafts_from_an_earlier_one():
    memory = DraftMemory()
    memory.add([1, 2, 3, 4, 5, 6], capacity=100)
    assert memory.propose([9, 2, 3], 3, min_match=2) == ([4, 5, 6], 2)
    assert memory.propose([9, 3], 3, min_match=2) == ([], 0)


def test_least_recently_used_documents_are_evicted():
    memory = DraftMemory()
    for first in (10, 20, 30):  # three documents of 10 tokens
        memory.add(list(range(first, first + 10)), capacity=30)
    assert memory.tokens == 30
    assert memory.propose([10, 11], 2, 2) == ([12, 13], 2)  # uses the oldest: it is the newest now
    memory.add(list(range(40, 50)), capacity=30)  # over capacity: down to 3/4 of it
    assert memory.tokens <= 30 * 0.75
    assert memory.propose([20, 21], 2, 2) == ([], 0)  # least recently used: gone
    assert memory.propose([30, 31], 2, 2) == ([], 0)  # next: gone too (down to the low water)
    assert memory.propose([10, 11], 2, 2) == ([12, 13], 2)
    assert memory.propose([40, 41], 2, 2) == ([42, 43], 2)


def test_a_document_longer_than_the_capacity_keeps_its_end():
    memory = DraftMemory()
    memory.add(list(range(100)), capacity=10)
    assert memory.tokens == 10
    assert memory.propose([91, 92], 3, 2) == ([93, 94, 95], 2)
    assert memory.propose([50, 51], 3, 2) == ([], 0)


def test_a_chat_turn_replaces_the_turn_it_continues():
    memory = DraftMemory()
    memory.add([1, 2, 3], capacity=100)
    memory.add([1, 2, 3, 4, 5], capacity=100)  # the next turn's prompt holds the last
    assert (memory.documents, memory.tokens) == (1, 5)
    memory.add([1, 2, 3, 4], capacity=100)  # a repeated, shorter call: held already
    assert (memory.documents, memory.tokens) == (1, 5)
    memory.add([1, 2, 7], capacity=100)
    assert (memory.documents, memory.tokens) == (2, 8)


def test_many_documents_stay_findable_across_merges():
    """The newest documents are indexed apart and merged now and then: every one
    stays findable, and their occurrences vote together."""
    memory = DraftMemory()
    for i in range(40):
        memory.add([1000 + i, 1, 2, 3, 2000 + i], capacity=10_000)
        for j in (0, i // 2, i):
            assert memory.propose([1000 + j, 1], 1, 2) == ([2], 2)
            assert memory.propose([1000 + j, 1, 2, 3], 1, 2) == ([2000 + j], 4)
        # what follows 1 2 3 differs in each document: the newest of two wins the
        # tie, three or more disagree (voting across the main and the fresh index)
        assert memory.propose([1, 2, 3], 1, 2) == (([2000 + i], 3) if i < 2 else ([], 0))


def test_a_call_is_remembered_when_the_next_begins():
    memory = DraftMemory()
    history = [1, 2, 3]
    memory.begin(history, capacity=100)
    history += [4, 5]
    memory.note(history)
    assert memory.tokens == 0  # the running call is not drafted from
    memory.begin([7, 8], capacity=100)
    assert memory.tokens == 5 and memory.propose([2, 3], 2, 2) == ([4, 5], 2)


def test_bad_capacity():
    with pytest.raises(ValueError, match="capacity"):
        DraftMemory().add([1, 2], capacity=0)


def test_each_model_object_has_its_own_memory():
    class Model:
        pass

    a, b = Model(), Model()
    memory_of(a).add([1, 2, 3], capacity=10)
    assert memory_of(a) is memory_of(a) and memory_of(b).tokens == 0
    held = weakref.ref(memory_of(a))
    del a
    gc.collect()
    assert held() is None  # gone with its model
    with pytest.raises(TypeError, match="weak references"):
        memory_of(42)


# ---------------------------------------------------------------- drafting through speculative decoding


def recall_counts(stats, kind: str) -> tuple[int, int]:
    """(drafted, accepted) of a recall source's matches of every length."""
    counts = [s for name, s in stats.by_source.items() if name.startswith(kind)]
    return sum(s.drafted for s in counts), sum(s.accepted for s in counts)


# Context n-grams only of 16 tokens (hardly ever matching in these short texts), so
# that the fixed-length rounds draft from the memory or the corpus.
RECALL_ONLY = dict(draft="ngram", ngram_min=16, ngram_max=16, max_draft=4, adaptive=False)


@pytest.fixture
def model(tiny_llama, river_cache):
    from river_cpp import RiverModel

    with RiverModel(tiny_llama, n_ctx=256, n_threads=1, river="q4_0") as model:
        yield model


@pytest.mark.parametrize("spec_options", [RECALL_ONLY, {}])
def test_greedy_tokens_are_plain_decodings_with_the_memory_populated(model, spec_options):
    """Greedy decoding after earlier calls filled the memory: the plain run's tokens.
    A repeated prompt is drafted from the earlier call's output."""
    from river_cpp import Speculative

    spec = Speculative(**spec_options)
    prompts = ["The quick brown fox", "Once upon a time", "The quick brown fox"]
    for prompt in prompts:
        plain = model.generate(prompt, max_tokens=30, speculative=False)
        fast = model.generate(prompt, max_tokens=30, speculative=spec)
        assert fast.token_ids == plain.token_ids, prompt
    assert fast.speculative.memory_capacity == spec.memory_tokens and fast.speculative.memory_tokens > 0
    if spec_options:
        drafted, accepted = recall_counts(fast.speculative, "memory")
        assert accepted > 0 and drafted > 0
    assert "memory" in fast.speculative.summary()


def test_sampled_tokens_are_plain_decodings_with_the_memory_populated(model):
    """Seeded sampling: each token is the backbone's sample with its position's draw,
    drafted from the memory or not; different seeds make the memory's continuations
    partly wrong, so that drafts are rejected too."""
    from river_cpp import Speculative

    spec = Speculative(**RECALL_ONLY)
    options = dict(max_tokens=24, temperature=0.8, top_k=20, top_p=0.95, min_p=0.0)
    drafted = accepted = 0
    for seed in (1, 2, 1, 3, 2):
        plain = model.generate("The quick brown fox", seed=seed, speculative=False, **options)
        fast = model.generate("The quick brown fox", seed=seed, speculative=spec, **options)
        assert fast.token_ids == plain.token_ids, f"seed {seed}"
        counts = recall_counts(fast.speculative, "memory")
        drafted, accepted = drafted + counts[0], accepted + counts[1]
    assert drafted > accepted > 0


def test_greedy_and_sampled_tokens_with_a_corpus(model, tmp_path):
    """A corpus holding an earlier output: drafted from, the plain run's tokens."""
    from river_cpp import Speculative

    prompt = "Once upon a time"
    earlier = model.generate(prompt, max_tokens=40, speculative=False)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "story.txt").write_text(prompt + earlier.text)
    spec = Speculative(**RECALL_ONLY, memory=False, corpus=[tmp_path / "corpus"])
    fast = model.generate(prompt, max_tokens=40, speculative=spec)
    assert fast.token_ids == earlier.token_ids
    assert recall_counts(fast.speculative, "corpus")[1] > 0
    assert fast.speculative.corpus_tokens > 0 and fast.speculative.memory_capacity == 0
    options = dict(max_tokens=24, temperature=0.8, top_k=20, top_p=0.95, min_p=0.0)
    for seed in range(3):
        plain = model.generate(prompt, seed=seed, speculative=False, **options)
        assert model.generate(prompt, seed=seed, speculative=spec, **options).token_ids == plain.token_ids


def test_memory_off_leaves_the_memory_alone(model):
    from river_cpp import Speculative

    for _ in range(3):
        model.generate("The quick brown fox", max_tokens=8, speculative=Speculative(memory=False))
    assert memory_of(model.backbone).tokens == 0 and memory_of(model.backbone).documents == 0


def test_the_memory_never_crosses_models(tiny_llama, river_cache):
    from river_cpp import RiverModel, Speculative

    spec = Speculative(**RECALL_ONLY)
    with RiverModel(tiny_llama, n_ctx=256, n_threads=1, river="q4_0") as first:
        for _ in range(2):
            first.generate("The quick brown fox", max_tokens=20, speculative=spec)
        assert memory_of(first.backbone).tokens > 0
        with RiverModel(tiny_llama, n_ctx=256, n_threads=1, river="q4_0") as second:
            result = second.generate("The quick brown fox", max_tokens=20, speculative=spec)
            assert recall_counts(result.speculative, "memory") == (0, 0)
            assert result.speculative.memory_tokens == 0
