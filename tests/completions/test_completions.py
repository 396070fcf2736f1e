"""river_cpp.completions and RiverModel's lock: OpenAI shapes, streaming = non-streaming,
seeded sampling, two threads on one model, and the prompt cache against a cold run."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from river_cpp import ExitPolicy, RiverModel
from river_cpp.decoding.steps import prefill
from river_cpp.engine.compute.context import ContextOverflowError

N_CTX = 256
PROMPT = "The quick brown fox"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me about rivers."}]


@pytest.fixture(scope="module")
def model(tiny_llama4: Path, tmp_path_factory) -> RiverModel:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        with RiverModel(tiny_llama4, n_ctx=N_CTX, n_threads=2, progress=False) as model:
            yield model


# ---------------------------------------------------------------- shapes


@pytest.mark.parametrize("speculative", [None, False])
def test_completion_shape(model, speculative):
    response = model.create_completion(PROMPT, max_tokens=6, temperature=0, speculative=speculative)
    assert response["object"] == "text_completion" and response["id"].startswith("cmpl-")
    assert isinstance(response["created"], int) and response["model"] == Path(model.model_path).name
    (choice,) = response["choices"]
    assert set(choice) == {"text", "index", "logprobs", "finish_reason"}
    assert choice["finish_reason"] in ("stop", "length") and choice["logprobs"] is None
    usage = response["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens"] == len(model.tokenize(PROMPT, add_bos=True, special=True))
    river = usage["river"]
    assert len(river["exit_histogram"]) == model.n_layer + 1
    # every token computed: the completion's and the end-of-turn token that ended it (not counted in usage)
    computed = usage["completion_tokens"] + (choice["finish_reason"] == "stop")
    assert sum(river["exit_histogram"]) == computed
    assert 0.0 <= river["backbone_layers_avoided"] <= 1.0
    assert river["mean_exit_layer"] == pytest.approx(
        sum(d * c for d, c in enumerate(river["exit_histogram"])) / computed, abs=1e-3
    )
    # Exact by default: drafted and verified (the counts are there); False decodes plainly.
    assert ("speculative" in river) == (speculative is None)


def test_chat_completion_shape(model):
    response = model.create_chat_completion(MESSAGES, max_tokens=6, temperature=0)
    assert response["object"] == "chat.completion" and response["id"].startswith("chatcmpl-")
    (choice,) = response["choices"]
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    chunks = list(model.create_chat_completion(MESSAGES, max_tokens=6, temperature=0, stream=True))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}  # llama-cpp-python's first chunk
    assert all(c["object"] == "chat.completion.chunk" and "usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == choice["finish_reason"]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_speculative_usage_and_per_call_policy(model):
    policy = model.policy
    response = model.create_completion(PROMPT, max_tokens=8, temperature=0, speculative=True)
    spec = response["usage"]["river"]["speculative"]
    assert spec["drafted"] >= spec["accepted"] >= 0 and 0.0 <= spec["acceptance_rate"] <= 1.0
    backbone = model.create_completion(PROMPT, max_tokens=8, temperature=0, policy=ExitPolicy.never())
    assert response["choices"][0]["text"] == backbone["choices"][0]["text"]  # lossless
    assert backbone["usage"]["river"]["mean_exit_layer"] == model.n_layer
    assert model.policy == policy


def test_logprobs(model):
    response = model.create_completion(PROMPT, max_tokens=5, temperature=0, logprobs=3)
    logprobs = response["choices"][0]["logprobs"]
    assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == len(logprobs["top_logprobs"])
    assert "".join(logprobs["tokens"]) == response["choices"][0]["text"]
    for chosen, top in zip(logprobs["token_logprobs"], logprobs["top_logprobs"]):
        assert chosen <= 0 and chosen == pytest.approx(max(top.values()))  # greedy picks the top token
    chat = model.create_chat_completion(MESSAGES, max_tokens=5, temperature=0, logprobs=True, top_logprobs=2)
    content = chat["choices"][0]["logprobs"]["content"]
    assert content and all(len(item["top_logprobs"]) == 2 and item["logprob"] <= 0 for item in content)
    values = [t["logprob"] for t in content[0]["top_logprobs"]]
    assert values == sorted(values, reverse=True)


@pytest.mark.parametrize(
    "options",
    [
        {"temperature": -1},
        {"top_p": 2.0},
        {"logprobs": 21},
        {"stop": [""]},
        {"stream_options": {"include_usage": 1}},
        {"policy": ExitPolicy.at_layer(99)},
    ],
)
def test_invalid_options_raise_before_anything_runs(model, options):
    with pytest.raises((ValueError, TypeError)):
        model.create_completion(PROMPT, stream=True, **options)
    assert model.scheduler.in_use == 0  # every sequence given back


def test_context_overflow_names_the_counts(model):
    with pytest.raises(ContextOverflowError) as caught:
        model.create_completion(list(range(100, 100 + N_CTX)), max_tokens=4)
    assert caught.value.prompt_tokens == N_CTX and caught.value.n_ctx == N_CTX
    with pytest.raises(ValueError, match="role"):
        model.create_chat_completion([{"role": "robot", "content": "hi"}])


# ---------------------------------------------------------------- text and sampling


@pytest.mark.slow
def test_streaming_and_non_streaming_give_the_same_text(model):
    whole = model.create_completion(PROMPT, max_tokens=16, temperature=0)
    chunks = list(
        model.create_completion(
            PROMPT, max_tokens=16, temperature=0, stream=True, stream_options={"include_usage": True}
        )
    )
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == whole["choices"][0]["text"]
    assert (
        chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"]
    )
    chat = model.create_chat_completion(MESSAGES, max_tokens=16, temperature=0)
    streamed = "".join(
        c["choices"][0]["delta"].get("content", "")
        for c in model.create_chat_completion(MESSAGES, max_tokens=16, temperature=0, stream=True)
    )
    assert streamed == chat["choices"][0]["message"]["content"]


def test_seeded_sampling_is_reproducible(model):
    options = dict(max_tokens=12, temperature=1.5, top_k=40, top_p=1.0, min_p=0.0)
    first = model.create_completion(PROMPT, seed=7, **options)["choices"][0]["text"]
    assert model.create_completion(PROMPT, seed=7, **options)["choices"][0]["text"] == first
    others = {model.create_completion(PROMPT, seed=s, **options)["choices"][0]["text"] for s in range(8, 12)}
    assert others != {first}


def test_cancel_stops_a_generation(model):
    cancel = threading.Event()
    chunks = model.create_completion(PROMPT, max_tokens=100, temperature=0, stream=True, cancel=cancel, stop=["@@@@@"])
    next(chunks)
    cancel.set()
    rest = list(chunks)
    assert rest[-1]["choices"][0]["finish_reason"] == "cancelled" and len(rest) < 10
    assert model.scheduler.in_use == 0  # every sequence given back


# ---------------------------------------------------------------- threads and the prompt cache


def test_two_threads_share_one_model(model):
    prompts = ["The quick brown fox", "Once upon a time", "Rivers flow", "In the beginning"]
    expected = {p: model.create_completion(p, max_tokens=12, temperature=0)["choices"][0]["text"] for p in prompts}
    got: dict[str, list[str]] = {p: [] for p in prompts}
    errors: list[BaseException] = []

    def work(order: list[str]) -> None:
        try:
            for _ in range(3):
                for p in order:
                    if len(got[p]) % 2:
                        text = "".join(
                            c["choices"][0]["text"]
                            for c in model.create_completion(p, max_tokens=12, temperature=0, stream=True)
                        )
                    else:
                        text = model.create_completion(p, max_tokens=12, temperature=0)["choices"][0]["text"]
                    got[p].append(text)
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=work, args=(prompts,)), threading.Thread(target=work, args=(prompts[::-1],))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert all(texts == [expected[p]] * 6 for p, texts in got.items())


def test_a_stream_holds_the_model_until_closed(model):
    stream = model.create_completion(PROMPT, max_tokens=50, temperature=0, stream=True)
    next(stream)
    done = threading.Event()
    other = threading.Thread(target=lambda: (model.create_completion("Hello", max_tokens=2), done.set()))
    other.start()
    time.sleep(0.3)
    assert not done.is_set()  # waits its turn
    stream.close()
    other.join(10)
    assert done.is_set()


def test_prompt_cache_gives_the_logits_of_a_cold_run(model):
    first = model.tokenize("A river runs through the valley, and", add_bos=True, special=True)
    second = first + model.tokenize(" the town grew along its banks.", add_bos=False)
    model.reset()
    model.forward(first, route="prompt")
    assert model.cached_prefix(second) == len(first)
    warm = prefill(model, second).logits.copy()
    model.reset()
    cold = prefill(model, second).logits.copy()
    np.testing.assert_allclose(warm, cold, rtol=0, atol=1e-4 * np.abs(cold).max())
    # Through the API: a second chat turn reuses the first turn's prompt.
    model.reset()
    turn = model.create_chat_completion(MESSAGES, max_tokens=4, temperature=0)
    follow = MESSAGES + [turn["choices"][0]["message"], {"role": "user", "content": "And lakes?"}]
    again = model.create_chat_completion(follow, max_tokens=4, temperature=0)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= turn["usage"]["prompt_tokens"] - 1
