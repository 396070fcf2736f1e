"""RiverModel(prompt_cache=...): a request whose prompt begins as an earlier one did
loads that prefix instead of computing it, and gives the tokens a fresh model gives, on
river-cpp's graph and on llama.cpp's backbone; a damaged cache file is skipped."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from river_cpp import RiverModel
from river_cpp.engine.compute.prompt_cache import PromptCache, cache_scope

DOC_A = list(range(300, 360))
DOC_B = list(range(700, 760))


def _greedy(model: RiverModel, ids: list[int]) -> list[int]:
    return model.generate(ids, max_tokens=12, temperature=0.0, speculative=False).token_ids


def _completion(model: RiverModel, ids: list[int]) -> str:
    return model.create_completion(ids, max_tokens=12, temperature=0.0)["choices"][0]["text"]


@pytest.mark.parametrize("engine", ["graph", "llama.cpp"])
def test_reuse_gives_the_fresh_tokens(tiny_llama, engine):
    prompts = [DOC_A + [11, 12], DOC_B + [13], DOC_A + [14, 15, 16], DOC_B + [17, 18]]
    with RiverModel(tiny_llama, river=None, n_ctx=256, n_threads=1, engine=engine) as fresh:
        expected = []
        for ids in prompts:
            fresh.reset()
            expected.append(_greedy(fresh, ids))
    cache = PromptCache(min_tokens=8)
    with RiverModel(tiny_llama, river=None, n_ctx=256, n_threads=1, engine=engine, prompt_cache=cache) as model:
        results = [model.generate(ids, max_tokens=12, temperature=0.0, speculative=False) for ids in prompts]
        assert model.prompt_cache is cache
    assert [r.token_ids for r in results] == expected  # A, B, then A and B again: each from the cache
    assert [r.cached_tokens for r in results] == [0, 0, len(DOC_A), len(DOC_B)]
    assert cache.hits == 2 and cache.reused_tokens >= 2 * 60


@pytest.mark.parametrize("n_seq_max", [1, 2])
def test_a_sequence_another_scope_filled_is_forgotten(tiny_llama, n_seq_max):
    """The tokens a sequence holds serve the next request of the scope that filled it
    only (the server's scope per API key): another scope's request starts it afresh."""
    with RiverModel(tiny_llama, river=None, n_ctx=256, n_threads=1, n_seq_max=n_seq_max) as model:
        cached = []
        for scope in ("a", "a", "b", "b", "a"):
            with cache_scope(scope):
                for _ in range(n_seq_max):
                    cached.append(model.generate(DOC_A + [11, 12], max_tokens=2, speculative=False).cached_tokens)
    per_scope = cached[::n_seq_max]
    n_reused = len(DOC_A) + 1  # all but the last row, which runs to give the prompt's logits
    assert per_scope[0] == 0 and per_scope[1] == n_reused  # "a" reuses what "a" left
    assert per_scope[2] == 0 and per_scope[3] > 0  # "b" does not; then its own
    # "a" again: with one sequence "b" refilled it; with two, "b" kept to the one it had
    # emptied, and "a"'s own is still there
    assert per_scope[4] == (0 if n_seq_max == 1 else n_reused)


def test_a_disk_cached_prefix_after_a_restart_and_a_damaged_file(tiny_llama, tmp_path, caplog):
    ids = DOC_A + [11, 12]
    with RiverModel(tiny_llama, river=None, n_ctx=256, n_threads=1, prompt_cache=tmp_path) as model:
        first = _greedy(model, ids)
    (path,) = tmp_path.glob("*.rvpc")
    with RiverModel(tiny_llama, river=None, n_ctx=256, n_threads=1, prompt_cache=tmp_path) as restarted:
        assert _greedy(restarted, DOC_A + [11, 12]) == first
        assert restarted.prompt_cache.reused_tokens == len(ids) - 1
    path.write_bytes(path.read_bytes()[:-100])  # truncated
    with RiverModel(tiny_llama, river=None, n_ctx=256, n_threads=1, prompt_cache=tmp_path) as damaged:
        with caplog.at_level(logging.WARNING, logger="river_cpp.engine.compute.prompt_cache"):
            assert _greedy(damaged, ids) == first
        assert damaged.prompt_cache.reused_tokens == 0
    assert "prompt cache: ignoring" in caplog.text


def test_bad_prompt_cache_option(tiny_llama):
    with pytest.raises(TypeError, match="prompt_cache must be"):
        RiverModel(tiny_llama, river=None, n_ctx=64, n_threads=1, prompt_cache=2.5)


def test_llama_set_cache_takes_llama_cpp_python_caches(tiny_llama):
    import llama_cpp

    import river_cpp

    with river_cpp.Llama(model_path=str(tiny_llama), n_ctx=256, n_threads=1, verbose=False) as llm:
        llm.set_cache(llama_cpp.LlamaRAMCache(capacity_bytes=1 << 24))
        cache = llm._river.prompt_cache
        assert isinstance(cache, PromptCache) and cache.ram_bytes == 1 << 24
        first = llm.create_completion(DOC_A + [11], max_tokens=4, temperature=0.0)["choices"][0]["text"]
        llm.create_completion(DOC_B + [12], max_tokens=4, temperature=0.0)
        again = llm.create_completion(DOC_A + [11], max_tokens=4, temperature=0.0)["choices"][0]["text"]
        assert again == first and cache.hits >= 1
        llm.set_cache(None)
        assert llm._river.prompt_cache is None


def _in_threads(*jobs) -> list:
    """Run each job in its own thread, all at once; their results in order (a job's
    exception is raised here)."""
    results: list = [None] * len(jobs)

    def run(i: int) -> None:
        try:
            results[i] = jobs[i]()
        except BaseException as error:  # raised again in the caller's thread
            results[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def _streamed(model: RiverModel, ids: list[int]) -> list[int]:
    """A greedy answer read chunk by chunk, letting other threads run between chunks."""
    tokens = []
    for chunk in model.generate(ids, max_tokens=12, temperature=0.0, speculative=False, stream=True):
        tokens.append(chunk.token_id)
        time.sleep(0.001)
    return tokens


def test_two_threads_on_one_model_with_a_prompt_cache_answer_as_alone(tiny_llama):
    """One thread streams greedy answers while another asks for completions of other
    documents on the same model: finding a cached prefix is a query, and restoring one
    happens inside the locked prefill, so neither thread's answer changes (before, the
    second thread's lookup loaded its document into the cache under the first's stream)."""
    streamed = [DOC_A + [11, 12], DOC_A + [13]]
    completed = [DOC_B + [14], DOC_B + [15, 16]]
    options = dict(river=None, n_ctx=256, n_threads=1)
    with RiverModel(tiny_llama, **options) as alone:
        expected = ([_streamed(alone, ids) for ids in streamed], [_completion(alone, ids) for ids in completed])
    with RiverModel(tiny_llama, **options, prompt_cache=PromptCache(min_tokens=8)) as model:
        for ids in streamed + completed:  # every document is in the prompt cache
            _greedy(model, ids)
        for _ in range(8):
            got = _in_threads(
                lambda: [_streamed(model, ids) for ids in streamed],
                lambda: [_completion(model, ids) for ids in completed],
            )
            assert tuple(got) == expected


def _turn(model: RiverModel, messages: list[dict], **sampling) -> tuple[list[int], list[float], int]:
    """A chat turn's tokens, their logprobs and the prompt positions taken from the cache."""
    prompt = model.tokenizer.apply_chat_template(messages)
    chunks = list(model.generate(prompt, stream=True, max_tokens=24, logprobs=1, **sampling))
    return [c.token_id for c in chunks], [c.logprob for c in chunks], chunks[0].cached_tokens


@pytest.mark.real_model
@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {"temperature": 0.8, "seed": 5}], ids=["greedy", "seeded"])
def test_a_chats_second_turn_from_the_cache_is_the_cold_conversations(demo_model, sampling):
    """The second turn reuses the first turn's positions, its answer's computed as steps;
    sent cold, the same conversation is one prompt. With our own products and attention
    (own_attention=True; with ggml's attention this fails) the two are the same bits,
    so the answer does not depend on what was cached."""
    questions = ["Name a river in Europe.", "Write one sentence about water.", "What is 2 + 3?"]
    options = dict(river=None, n_ctx=512, n_threads=2, progress=False, own_attention=True)
    with RiverModel(demo_model, prompt_cache=True, **options) as warm, RiverModel(demo_model, **options) as cold:
        for question in questions:
            first = [{"role": "user", "content": question}]
            answer, _, _ = _turn(warm, first, **sampling)
            second = first + [
                {"role": "assistant", "content": warm.detokenize(answer)},
                {"role": "user", "content": "Say it again, shorter."},
            ]
            tokens, logprobs, cached = _turn(warm, second, **sampling)
            assert cached > 0  # the first turn's positions came from the cache
            cold.reset()
            assert (tokens, logprobs) == _turn(cold, second, **sampling)[:2], question
