"""river_cpp.Llama against llama_cpp.Llama: the everyday calls with the same file and
arguments give the same greedy text, finish reasons, usage counts, stream chunks and
dict shapes (river-cpp adds `usage.river` and `usage.prompt_tokens_details`). On the
demo model's F16 backbone, whose greedy paths both engines follow on these prompts;
bytes that are not UTF-8 come from a logits processor that makes both emit the same
tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
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
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert got["usage"][key] == expected["usage"][key], key


STREAMS: dict[str, Callable[[Any], Any]] = {
    "to the end of the turn": lambda llm: llm("Q: What is 2+2?\nA:", max_tokens=24, temperature=0, stream=True),
    "to max_tokens": lambda llm: llm("The capital of France is", max_tokens=8, temperature=0, stream=True),
    "to a stop string": lambda llm: llm(
        "Q: Name a planet. A:", max_tokens=24, temperature=0, stop=["\n", "."], stream=True
    ),
    "chat": lambda llm: llm.create_chat_completion(
        [{"role": "user", "content": "Say hi."}], max_tokens=24, temperature=0, stream=True
    ),
}


def choices(chunks) -> list[dict]:
    """Each chunk's choice without its logprobs (compared apart: rounding)."""
    return [{k: v for k, v in chunk["choices"][0].items() if k != "logprobs"} for chunk in chunks]


@pytest.mark.parametrize("name", list(STREAMS))
def test_streams_give_the_same_chunks(pair, name):
    reference, ours = pair
    expected, got = list(STREAMS[name](reference)), list(STREAMS[name](ours))
    assert choices(got) == choices(expected)
    assert shape(got[0]) == shape(expected[0])


# ---------------------------------------------------------------- bytes that are not UTF-8


class Forced:
    """A logits processor that makes the model emit `script`, then end its turn."""

    def __init__(self, script: list[int], end: int) -> None:
        self.script, self.end = script, end
        self.n_prompt: int | None = None

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if self.n_prompt is None:
            self.n_prompt = len(input_ids)
        at = len(input_ids) - self.n_prompt
        out = np.full_like(scores, -1e9)
        out[self.script[at] if at < len(self.script) else self.end] = 0.0
        return out


@pytest.fixture(scope="module")
def scripts(pair) -> dict[str, list[int]]:
    """Token sequences the byte-level vocabulary spells: some are not UTF-8."""
    reference, _ = pair
    byte = {}
    for token in range(reference.n_vocab()):
        piece = reference.detokenize([token])
        if len(piece) == 1 and piece[0] in (0xE4, 0xB8, 0xAD):
            byte[piece[0]] = token
    assert len(byte) == 3, "the demo model's vocabulary has a token for each byte"

    def words(text: str) -> list[int]:
        return reference.tokenize(text.encode(), add_bos=False)

    return {
        "a lone continuation byte": words(" The") + [byte[0xAD]] + words(" end is near"),
        "a character cut short": words(" a") + [byte[0xE4], byte[0xB8]] + words(" b c"),
        "a character split across tokens": words(" a") + [byte[0xE4], byte[0xB8], byte[0xAD]] + words(" b"),
        "a stop string after a broken character": words(" x") + [byte[0xE4]] + words(" Paris.\nQ: and"),
    }


def without_numbers(logprobs: Any) -> Any:
    """A logprobs object's tokens and offsets, not its numbers (the engines' logits agree
    to rounding only)."""
    if logprobs is None:
        return None
    if "content" in logprobs:
        return [entry["token"] for entry in logprobs["content"]]
    return logprobs["tokens"], logprobs["text_offset"]


def forced_answer(llm, script: list[int], *, chat: bool, stream: bool, **options) -> Any:
    """What a call gives when the model emits `script`: each chunk's choice (a stream), or
    the choice and usage, logprobs without their numbers."""
    forced = llama_cpp.LogitsProcessorList([Forced(script, llm.token_eos())])
    if chat:
        out = llm.create_chat_completion(
            [{"role": "user", "content": "Hi"}], temperature=0, stream=stream, logits_processor=forced, **options
        )
    else:
        out = llm("Hello", temperature=0, stream=stream, logits_processor=forced, **options)
    if stream:
        chunks = list(out)
        return [(c, without_numbers(chunk["choices"][0]["logprobs"])) for c, chunk in zip(choices(chunks), chunks)]
    choice = dict(out["choices"][0])
    logprobs = without_numbers(choice.pop("logprobs"))
    return choice, logprobs, {k: out["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}


COMPLETION_OPTIONS = {
    "plain": dict(max_tokens=24),
    "stop strings": dict(max_tokens=24, stop=["\n", "Q:"]),
    "max_tokens": dict(max_tokens=5),
    "logprobs": dict(max_tokens=24, logprobs=2),
}


@pytest.mark.parametrize("options", list(COMPLETION_OPTIONS))
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    "case",
    [
        "a lone continuation byte",
        "a character cut short",
        "a character split across tokens",
        "a stop string after a broken character",
    ],
)
def test_invalid_utf8_is_dropped_as_llama_cpp_python_drops_it(pair, scripts, case, stream, options):
    reference, ours = pair
    kwargs = dict(chat=False, stream=stream, **COMPLETION_OPTIONS[options])
    got = forced_answer(ours, scripts[case], **kwargs)
    assert got == forced_answer(reference, scripts[case], **kwargs)
    assert "\ufffd" not in str(got)


@pytest.mark.parametrize("logprobs", [False, True], ids=["text", "logprobs"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_invalid_utf8_in_a_chat_is_dropped_as_llama_cpp_python_drops_it(pair, scripts, stream, logprobs):
    reference, ours = pair
    script = scripts["a lone continuation byte"] + scripts["a character split across tokens"]
    kwargs = dict(chat=True, stream=stream, max_tokens=24, logprobs=logprobs, top_logprobs=1 if logprobs else None)
    got = forced_answer(ours, script, **kwargs)
    assert got == forced_answer(reference, script, **kwargs)
    assert "\ufffd" not in str(got)
