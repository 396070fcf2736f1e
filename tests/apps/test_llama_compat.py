"""river_cpp.Llama against llama_cpp.Llama: the everyday calls with the same file and
arguments give the same greedy text, finish reasons and dict shapes (river-cpp adds
`usage.river` and `usage.prompt_tokens_details`). On the demo model's F16 backbone,
whose greedy paths both engines follow on these prompts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

import river_cpp

llama_cpp = pytest.importorskip("llama_cpp")

pytestmark = pytest.mark.real_model

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


@pytest.fixture(scope="module")
def pair(demo_backbone: Path, tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        ours = river_cpp.Llama(model_path=str(demo_backbone), n_ctx=512, verbose=False)
        reference = llama_cpp.Llama(model_path=str(demo_backbone), n_ctx=512, verbose=False, logits_all=True)
        yield reference, ours
        ours.close()
        reference.close()


def paris(llm) -> int:
    return llm.tokenize(b" Paris", add_bos=False)[0]


CALLS: dict[str, Callable[[Any], Any]] = {
    "completion": lambda llm: llm("The capital of France is", max_tokens=12, temperature=0),
    "echo and stop": lambda llm: llm("Q: Name a planet. A:", max_tokens=12, temperature=0, echo=True, stop=["\n", "."]),
    "logprobs": lambda llm: llm("One, two,", max_tokens=6, temperature=0, logprobs=3),
    "logit_bias": lambda llm: llm(
        "The capital of France is", max_tokens=8, temperature=0, logit_bias={paris(llm): -100.0}
    ),
    "penalties": lambda llm: llm(
        "one one one one",
        max_tokens=12,
        temperature=0,
        repeat_penalty=1.3,
        presence_penalty=0.5,
        frequency_penalty=0.5,
    ),
    "chat": lambda llm: llm.create_chat_completion(
        [{"role": "user", "content": "What is 2+2?"}], max_tokens=12, temperature=0
    ),
    "json mode": lambda llm: llm.create_chat_completion(
        [{"role": "user", "content": "Describe a cat as JSON."}],
        max_tokens=24,
        temperature=0,
        response_format={"type": "json_object"},
    ),
    "schema": lambda llm: llm.create_chat_completion(
        [{"role": "user", "content": "Name and age of Bob, 30."}],
        max_tokens=24,
        temperature=0,
        response_format={"type": "json_object", "schema": SCHEMA},
    ),
    "grammar": lambda llm: llm(
        "Is the sky blue? Answer:",
        max_tokens=4,
        temperature=0,
        grammar=llama_cpp.LlamaGrammar.from_string('root ::= " yes" | " no"'),
    ),
}


def shape(value: Any) -> Any:
    """The keys of nested dicts (the first item of lists), river-cpp's usage extras left out."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items() if k not in ("river", "prompt_tokens_details")}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [shape(value[0])]
    return type(value).__name__ if value is not None else None


@pytest.mark.parametrize("name", list(CALLS))
def test_the_same_call_gives_the_same_greedy_answer_and_shape(pair, name):
    reference, ours = pair
    expected, got = CALLS[name](reference), CALLS[name](ours)
    expected_logprobs = expected["choices"][0].pop("logprobs")
    got_logprobs = got["choices"][0].pop("logprobs")
    assert got["choices"][0] == expected["choices"][0]
    if expected_logprobs is None:
        assert got_logprobs is None
    else:  # the two engines' logits agree to float rounding, not bit for bit
        for key in ("tokens", "text_offset"):
            assert got_logprobs[key] == expected_logprobs[key]
        assert got_logprobs["token_logprobs"] == pytest.approx(expected_logprobs["token_logprobs"], abs=0.02)
        for mine, theirs in zip(got_logprobs["top_logprobs"], expected_logprobs["top_logprobs"]):
            assert set(mine) <= set(theirs)  # llama-cpp-python adds the chosen token to the top ones
    assert shape(got) == shape(expected)
    assert got["usage"]["prompt_tokens"] == expected["usage"]["prompt_tokens"]
    # river-cpp counts the end-of-turn token that ended the text; llama-cpp-python does not
    ended = got["choices"][0]["finish_reason"] == "stop" and "stop" not in name
    extra = got["usage"]["completion_tokens"] - expected["usage"]["completion_tokens"]
    assert extra == (1 if ended else 0) or (ended and extra == 0)


def test_streaming_gives_the_same_text_and_chunk_shapes(pair):
    reference, ours = pair

    def chunks(llm) -> list[dict]:
        return list(llm("The capital of France is", max_tokens=8, temperature=0, stream=True))

    expected, got = chunks(reference), chunks(ours)
    assert "".join(c["choices"][0]["text"] for c in got) == "".join(c["choices"][0]["text"] for c in expected)
    assert got[-1]["choices"][0]["finish_reason"] == expected[-1]["choices"][0]["finish_reason"]
    assert shape(got[0]) == shape(expected[0])

    def chat_text(llm) -> str:
        parts = llm.create_chat_completion(
            [{"role": "user", "content": "Say hi."}], max_tokens=8, temperature=0, stream=True
        )
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in parts)

    assert chat_text(ours) == chat_text(reference)


def test_vocabulary_calls_match(pair):
    reference, ours = pair
    text = "Hello, world! Ünïcödé 🙂".encode()
    assert ours.tokenize(text) == reference.tokenize(text)
    assert ours.tokenize(b"<|im_start|>", special=True) == reference.tokenize(b"<|im_start|>", special=True)
    ids = reference.tokenize(text, add_bos=False)
    assert ours.detokenize(ids) == reference.detokenize(ids)
    assert ours.detokenize(ids[3:], prev_tokens=ids[:3]) == reference.detokenize(ids[3:], prev_tokens=ids[:3])
    for method in ("token_bos", "token_eos", "token_nl", "n_ctx", "n_vocab", "n_embd"):
        assert getattr(ours, method)() == getattr(reference, method)(), method
