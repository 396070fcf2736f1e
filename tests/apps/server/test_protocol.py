"""river_cpp.apps.server.protocol: every request field checked without a model or HTTP."""

from __future__ import annotations

import json

import pytest

from river_cpp.apps.server.protocol import (
    APIError,
    busy,
    check_prompt_fits,
    model_list,
    overflow_error,
    parse_json,
    parse_request,
    prompt_tokens,
)
from river_cpp.decoding.decision import SAMPLING_DEFAULTS, Decoding, preset_decoding
from river_cpp.decoding.sampling import SamplingParams
from river_cpp.decoding.speculative import Speculative
from river_cpp.engine.compute.context import ContextOverflowError
from river_cpp.engine.compute.policy import ExitPolicy

pytestmark = pytest.mark.server

N_LAYER = 4


# A served model's defaults: the library's, on a model with a river.
DEFAULTS = preset_decoding(has_river=True)


def completion(defaults: Decoding = DEFAULTS, has_river: bool = True, **fields):
    return parse_request({"prompt": "x", **fields}, chat=False, n_layer=N_LAYER, has_river=has_river, defaults=defaults)


def chat(**fields):
    body = {"messages": [{"role": "user", "content": "hi"}], **fields}
    return parse_request(body, chat=True, n_layer=N_LAYER, has_river=True, defaults=DEFAULTS)


# ---------------------------------------------------------------- the body


def test_parse_json_takes_objects_only():
    assert parse_json(b'{"prompt": "x"}') == {"prompt": "x"}
    for raw in (b'{"prompt": "x", "temperature": NaN}', b'{"t": Infinity}', b"{not json", b"\xff\xfe", b"[1, 2]"):
        with pytest.raises(APIError) as caught:
            parse_json(raw)
        assert caught.value.status == 400


def test_a_number_too_large_for_a_float_is_not_finite():
    body = parse_json(b'{"prompt": "x", "top_p": 1e999}')  # JSON, but parses as inf
    with pytest.raises(APIError) as caught:
        parse_request(body, chat=False, n_layer=N_LAYER, has_river=True, defaults=DEFAULTS)
    assert caught.value.param == "top_p" and "finite" in caught.value.message


# ---------------------------------------------------------------- fields


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": -0.5}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"min_p": -0.1}, "min_p"),
        ({"top_k": 1.5}, "top_k"),
        ({"repeat_penalty": 0}, "repeat_penalty"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"seed": 1 << 64}, "seed"),
        ({"n": 0}, "n"),
        ({"n": 17}, "n"),
        ({"best_of": 3}, "best_of"),
        ({"presence_penalty": "a lot"}, "presence_penalty"),
        ({"frequency_penalty": 3}, "frequency_penalty"),
        ({"typical_p": 1.5}, "typical_p"),
        ({"logit_bias": {"x": 1}}, "logit_bias"),
        ({"logit_bias": {"5": 101}}, "5"),
        ({"logit_bias": [1, 2]}, "logit_bias"),
        ({"echo": True}, "echo"),
        ({"suffix": "end"}, "suffix"),
        ({"tools": [{"type": "function"}]}, "tools"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"grammar": 7}, "grammar"),
        ({"stop": ["a", 3]}, "stop"),
        ({"stop": [""]}, "stop"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stream": "yes"}, "stream"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"stream": True, "stream_options": []}, "stream_options"),
        ({"stream": True, "stream_options": {"include_usage": "yes"}}, "include_usage"),
        ({"user": 7}, "user"),
        ({"model": 7}, "model"),
        ({"logprobs": 21}, "logprobs"),
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": [1, True]}, "prompt"),
        ({"prompt": None}, "prompt"),
    ],
)
def test_invalid_completion_fields_name_the_field(fields, param):
    with pytest.raises(APIError) as caught:
        completion(**fields)
    error = caught.value
    assert error.status == 400 and error.param == param
    assert set(error.body()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"messages": []}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ],
)
def test_invalid_chat_fields_name_the_field(fields, param):
    with pytest.raises(APIError) as caught:
        chat(**fields)
    assert caught.value.status == 400 and caught.value.param == param


def test_valid_fields_reach_the_options():
    parsed = completion(
        temperature=0, top_p=0.5, top_k=3, min_p=0.1, repeat_penalty=1.1, seed=-1, stop="\n", max_tokens=7
    )
    assert not parsed.chat and parsed.prompt == "x" and not parsed.stream
    options = parsed.options
    sampling = options["decoding"].sampling
    assert (sampling.temperature, sampling.top_p, sampling.top_k, sampling.min_p) == (0.0, 0.5, 3, 0.1)
    assert sampling.repeat_penalty == 1.1 and options["max_tokens"] == 7 and sampling.stop == ("\n",)
    assert sampling.seed == (1 << 64) - 1  # a negative seed wraps as llama.cpp's uint32/64 would


def test_a_batch_of_one_prompt_and_token_ids():
    assert completion(prompt=["one"]).prompt == "one"
    assert completion(prompt=[1, 2, 3]).prompt == [1, 2, 3]
    assert completion(prompt=[[1, 2]]).prompt == [1, 2]


def test_chat_max_completion_tokens_wins_over_max_tokens():
    assert chat(max_tokens=9, max_completion_tokens=5).options["max_tokens"] == 5
    assert chat(max_tokens=9).options["max_tokens"] == 9
    parsed = chat(logprobs=True, top_logprobs=3, stream=True, stream_options={"include_usage": True})
    assert parsed.chat and parsed.stream and parsed.options["top_logprobs"] == 3


def test_any_model_name_is_served():
    # One model answers whatever a request calls it; a name never loads a file.
    for name in ("tiny", "gpt-4o", "/etc/passwd", ""):
        assert completion(model=name).prompt == "x"


# ---------------------------------------------------------------- the river field


def test_sampling_defaults_are_the_endpoints_tables():
    # the same tables as RiverModel.create_completion / create_chat_completion
    assert completion().options["decoding"].sampling == SAMPLING_DEFAULTS["completion"]
    assert chat().options["decoding"].sampling == SAMPLING_DEFAULTS["chat"]
    assert SAMPLING_DEFAULTS["chat"].temperature == 0.2 and SAMPLING_DEFAULTS["completion"].temperature == 0.8


def test_river_tau_exit_layer_and_policy_objects():
    decoding = completion(river={"tau": 0.9, "min_layer": 1}).options["decoding"]
    assert decoding.policy == ExitPolicy.uniform(0.9, min_layer=1) and decoding.speculative is None  # lossy
    assert completion(river={"exit_layer": 1}).options["decoding"].policy == ExitPolicy.at_layer(1)
    saved = ExitPolicy.uniform(0.95, min_layer=2)
    assert completion(river={"policy": json.loads(saved.to_json())}).options["decoding"].policy == saved


@pytest.mark.parametrize(
    "river",
    [
        "fast",
        {"model": "/etc/passwd"},
        {"tau": 0.9, "exit_layer": 1},
        {"policy": "policy.json"},
        {"policy": {"thresholds": "none"}},
        {"speculative": "yes"},
    ],
)
def test_invalid_river_fields(river):
    with pytest.raises(APIError) as caught:
        completion(river=river)
    assert caught.value.status == 400 and caught.value.param == "river"


@pytest.mark.parametrize("river, param", [({"tau": "high"}, "tau"), ({"exit_layer": N_LAYER + 1}, "exit_layer")])
def test_river_values_out_of_range_name_the_value(river, param):
    with pytest.raises(APIError) as caught:
        completion(river=river)
    assert caught.value.param == param


def test_speculative_from_the_request_or_the_served_models_default():
    default = Decoding(ExitPolicy.never(), Speculative(max_draft=4), SamplingParams())
    assert completion(default).options["decoding"].speculative is default.speculative
    assert completion(default, river={}).options["decoding"].speculative is default.speculative
    # a lossy option says how the request decodes: plain decoding under it
    decoding = completion(default, river={"tau": 0.9}).options["decoding"]
    assert decoding.speculative is None and decoding.policy.beyond == 0.9
    decoding = completion(default, river={"speculative": False, "tau": 0.9}).options["decoding"]
    assert decoding.speculative is None and decoding.policy.beyond == 0.9
    assert completion(default, river={"speculative": False}).options["decoding"].speculative is None
    # River's own exits draft, with the served draft's settings; the answer is the backbone's
    decoding = completion(default, river={"speculative": True, "exit_layer": 2}).options["decoding"]
    assert decoding.speculative == Speculative(draft=ExitPolicy.at_layer(2), max_draft=4)
    assert completion(river={"speculative": True}).options["decoding"].speculative == Speculative()  # the default


def test_a_server_without_a_river_drafts_ngrams_and_refuses_exits():
    defaults = preset_decoding(has_river=False)
    assert completion(defaults, has_river=False).options["decoding"].speculative.draft == "ngram"
    assert completion(defaults, has_river=False, river={"speculative": True}).options["decoding"].speculative == (
        Speculative(draft="ngram")
    )
    with pytest.raises(APIError) as caught:
        completion(defaults, has_river=False, river={"tau": 0.9})
    assert caught.value.status == 400 and caught.value.param == "river" and "no river" in caught.value.message


# ---------------------------------------------------------------- the prompt against the context


class WordModel:
    """A stand-in with a tokenizer of words and a template joining messages by lines."""

    n_vocab = 100

    def __init__(self, n_ctx: int) -> None:
        self.n_ctx = n_ctx
        self.tokenizer = self

    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        return [0] * add_bos + [1] * len(text.split())

    def apply_chat_template(self, messages, add_assistant: bool = True) -> str:
        return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


def test_prompt_tokens_counts_text_chat_and_ids():
    model = WordModel(n_ctx=64)
    assert prompt_tokens(model, completion(prompt="a b c")) == 4  # BOS + three words
    assert prompt_tokens(model, completion(prompt=[5, 6])) == 2
    assert prompt_tokens(model, chat(messages=[{"role": "user", "content": "a b"}])) == 4  # BOS, "user:", a, b
    with pytest.raises(APIError) as caught:
        prompt_tokens(model, completion(prompt=[5, model.n_vocab]))
    assert caught.value.param == "prompt"
    with pytest.raises(APIError) as caught:
        prompt_tokens(model, chat(messages=[{"role": "wizard", "content": "hi"}]))
    assert caught.value.param == "messages" and "role" in caught.value.message


@pytest.mark.parametrize("is_chat", [False, True])
def test_check_prompt_fits_is_a_400_with_the_token_counts(is_chat):
    model = WordModel(n_ctx=4)
    fits = chat(messages=[{"role": "user", "content": "a"}]) if is_chat else completion(prompt="a b")
    check_prompt_fits(model, fits)  # 3 tokens of 4: one left to generate
    full = chat(messages=[{"role": "user", "content": "a b"}]) if is_chat else completion(prompt="a b c")
    with pytest.raises(APIError) as caught:
        check_prompt_fits(model, full)
    body = caught.value.body()["error"]
    assert caught.value.status == 400 and body["code"] == "context_length_exceeded"
    assert body["prompt_tokens"] == 4 and body["n_ctx"] == 4
    assert body["param"] == ("messages" if is_chat else "prompt")


# ---------------------------------------------------------------- shapes


def test_error_shapes():
    error = overflow_error(ContextOverflowError(10, 8), chat=False)
    assert error.body()["error"]["prompt_tokens"] == 10 and error.param == "prompt"
    error = busy("the model is loading")
    assert error.status == 503 and error.headers["Retry-After"].isdigit() and error.kind == "server_error"


def test_model_list_names_the_one_model():
    listing = model_list("alias", 123)
    assert listing["object"] == "list" and [m["id"] for m in listing["data"]] == ["alias"]
    assert "river" not in listing["data"][0]
    assert model_list("alias", 123, {"n_layer": 4})["data"][0]["river"] == {"n_layer": 4}


def test_structured_output_tools_and_penalties_become_options():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    tools = [{"type": "function", "function": {"name": "f"}}]
    parsed = chat(
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
        tools=tools,
        tool_choice="auto",
        logit_bias={"7": -100, "9": 2.5},
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        typical_p=0.9,
    )
    options = parsed.options
    assert options["response_format"]["json_schema"]["schema"] == schema
    assert options["tools"] == tools and options["tool_choice"] == "auto"
    sampling = options["decoding"].sampling
    assert sampling.logit_bias == ((7, -100.0), (9, 2.5))
    assert (sampling.presence_penalty, sampling.frequency_penalty, sampling.typical_p) == (0.5, -0.5, 0.9)
    legacy = chat(functions=[{"name": "f"}], function_call={"name": "f"}).options
    assert legacy["tools"] == tools and legacy["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert completion(grammar='root ::= "x"').options["grammar"] == 'root ::= "x"'


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"$ref": "#"}}}}, "response_format"),
        ({"response_format": {"type": "json_schema"}}, "response_format"),
        ({"tool_choice": "required"}, "tool_choice"),
        (
            {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"function": {"name": "g"}}},
            "tool_choice",
        ),
    ],
)
def test_invalid_structured_chat_fields_name_the_field(fields, param):
    with pytest.raises(APIError) as caught:
        chat(**fields)
    assert caught.value.status == 400 and caught.value.param == param


def test_completions_take_no_response_format_or_tools():
    for fields, param in (({"response_format": {"type": "json_object"}}, "response_format"), ({"tools": []}, "tools")):
        with pytest.raises(APIError) as caught:
            completion(**fields)
        assert caught.value.param == param
