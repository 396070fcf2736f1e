"""river_cpp.Llama: llama-cpp-python's calling conventions on a tiny model: the
vocabulary calls, echo/suffix/stop, refused arguments named, state, seeds, exactness
under drafts, tools, and hostile input that leaves the model usable."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from in_turn import read_in_turn

import river_cpp
from river_cpp import Speculative
from river_cpp.apps.dropin.llama import LLAMA_DEFAULT_SEED, LlamaState

N_CTX = 256


@pytest.fixture(scope="module")
def llm(tiny_tools_llama: Path, tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        with river_cpp.Llama(model_path=str(tiny_tools_llama), n_ctx=N_CTX, n_threads=1, verbose=False) as llm:
            yield llm


def test_vocabulary_and_sizes(llm):
    ids = llm.tokenize(b"Hello world")
    assert llm.detokenize(ids) == b"Hello world" and isinstance(llm.detokenize(ids), bytes)
    with pytest.raises(TypeError, match="bytes"):
        llm.tokenize("Hello")
    assert llm.n_ctx() == N_CTX and llm.n_vocab() == llm.river_model.n_vocab
    assert llm.token_eos() >= 0 and llm.token_nl() == llm.tokenize(b"\n", add_bos=False)[0]
    assert isinstance(llm.token_bos(), int)


def test_call_is_create_completion_with_echo_suffix_and_stop(llm):
    plain = llm("The river", max_tokens=8, temperature=0)
    assert plain["object"] == "text_completion"
    assert llm("The river", max_tokens=8, temperature=0)["choices"][0]["text"] == plain["choices"][0]["text"]
    echoed = llm("The river", max_tokens=8, temperature=0, echo=True, suffix="!")
    assert echoed["choices"][0]["text"] == "The river" + plain["choices"][0]["text"] + "!"
    text = plain["choices"][0]["text"]
    if len(text) > 2:
        stopped = llm("The river", max_tokens=8, temperature=0, stop=[text[1:3]])
        assert stopped["choices"][0]["text"] == text[:1] and stopped["choices"][0]["finish_reason"] == "stop"
    streamed = list(llm("The river", max_tokens=8, temperature=0, echo=True, stream=True))
    assert "".join(c["choices"][0]["text"] for c in streamed) == "The river" + text


@pytest.mark.parametrize(
    "options, name",
    [
        ({"mirostat_mode": 2}, "mirostat_mode"),
        ({"mirostat_tau": 3.0}, "mirostat_tau"),
        ({"logits_processor": [42]}, "logits_processor"),
        ({"logprobs": 2, "echo": True}, "echo"),
    ],
)
def test_a_call_argument_it_cannot_serve_is_named(llm, options, name):
    with pytest.raises((ValueError, TypeError), match=name):
        llm("x", max_tokens=2, **options)
    assert llm("x", max_tokens=2, tfs_z=0.5, mirostat_mode=0)["choices"]  # neutral (and ignored) values are fine


@pytest.mark.parametrize(
    "options, name",
    [
        ({"lora_path": "x.gguf"}, "lora_path"),
        ({"kv_overrides": {"llama.block_count": 1}}, "kv_overrides"),
        ({"chat_format": "vicuna"}, "chat_format"),
        ({"chat_format": "gemma"}, "chat_format"),  # its template is ChatML, not Gemma's
        ({"rope_freq_base": 12345.0}, "rope_freq_base"),
        ({"rope_freq_scale": 0.5}, "rope_freq_scale"),
        ({"yarn_attn_factor": 2.0}, "yarn_attn_factor"),
        ({"attention_type": 1}, "attention_type"),
    ],
)
def test_a_constructor_argument_it_cannot_serve_is_named(tiny_tools_llama, options, name):
    with pytest.raises(ValueError, match=name):
        river_cpp.Llama(model_path=str(tiny_tools_llama), verbose=False, **options)


def test_river_cpp_keywords_reach_the_model_and_are_checked_at_construction(tiny_tools_llama):
    path = str(tiny_tools_llama)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of them is "ignored"
        with river_cpp.Llama(
            path, n_ctx=N_CTX, n_threads=1, verbose=False, river=None, engine="graph", speculative=False
        ) as llm:
            model = llm.river_model
            assert model.options.river is None and model.river_path is None and model.options.engine == "graph"
            assert not model.options.progress  # follows verbose
            assert llm.n_threads == model.n_threads == 1 and llm.context_params.n_ctx == model.n_ctx == N_CTX
    with pytest.raises(ValueError, match="prefill"):
        river_cpp.Llama(path, verbose=False, embedding=True, prefill="sideways")  # before any model loads


def test_save_and_load_state(llm):
    llm.reset()
    first = llm("The river flows", max_tokens=6, temperature=0)
    state = llm.save_state()
    assert isinstance(state, LlamaState) and state.n_tokens == llm.n_tokens > 0
    llm.reset()
    assert llm.n_tokens == 0
    llm.load_state(state)
    assert llm.n_tokens == state.n_tokens
    again = llm("The river flows", max_tokens=6, temperature=0)
    assert again["choices"][0]["text"] == first["choices"][0]["text"]
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


def test_seeds_reproduce_and_drafts_keep_the_draw(llm):
    def sampled(seed=None, **options):
        return llm(
            "Once upon a time", max_tokens=12, temperature=1.0, seed=seed, top_k=0, top_p=1.0, min_p=0.0, **options
        )["choices"][0]["text"]

    assert sampled(3) == sampled(3)
    options = {"presence_penalty": 0.7, "frequency_penalty": 0.3, "typical_p": 0.9, "logit_bias": {"5": 2.0}}
    assert sampled(3, speculative=False, **options) == sampled(3, speculative=Speculative(), **options)
    # llama-cpp-python's rule: calls without a seed follow a sequence that set_seed starts
    llm.set_seed(11)
    first, second = sampled(), sampled()
    llm.set_seed(11)
    assert [sampled(), sampled()] == [first, second]
    llm.set_seed(LLAMA_DEFAULT_SEED)


def test_greedy_options_keep_exactness_under_drafts(llm):
    options = {"temperature": 0, "repeat_penalty": 1.2, "presence_penalty": 0.5, "logit_bias": {3: -1.0}}
    plain = llm("The river flows the river flows", max_tokens=16, speculative=False, **options)
    drafted = llm("The river flows the river flows", max_tokens=16, speculative=Speculative(draft="ngram"), **options)
    assert drafted["choices"][0]["text"] == plain["choices"][0]["text"]


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"unit": {"enum": ["c", "f"]}},
            "required": ["unit"],
            "additionalProperties": False,
        },
    },
}


def test_tools_and_the_older_functions(llm):
    messages = [{"role": "user", "content": "Weather?"}]
    named = llm.create_chat_completion(
        messages, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=80
    )
    choice = named["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather" and isinstance(json.loads(call["function"]["arguments"]), dict)
    legacy = llm.create_chat_completion(
        messages, functions=[WEATHER["function"]], function_call={"name": "get_weather"}, max_tokens=80
    )
    assert legacy["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    no_params = {"type": "function", "function": {"name": "now"}}
    called = llm.create_chat_completion(
        messages, tools=[no_params], tool_choice={"type": "function", "function": {"name": "now"}}, max_tokens=80
    )
    assert json.loads(called["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]) == {}


@pytest.mark.parametrize(
    "options, message",
    [
        ({"grammar": "root ::= nothing-here"}, "nothing-here"),
        ({"response_format": {"type": "json_object", "schema": {"$ref": "#"}}}, "schema"),
        ({"response_format": {"type": "xml"}}, "response_format.type"),
        ({"logit_bias": {10**9: 1.0}}, "outside the vocabulary"),
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "name"),
        ({"tool_choice": "required"}, "needs tools"),
    ],
)
def test_hostile_input_is_a_clear_error_and_the_model_stays_usable(llm, options, message):
    with pytest.raises(ValueError, match=message):
        llm.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=4, **options)
    assert llm("The river", max_tokens=2)["choices"][0]["text"] is not None


def test_a_grammar_with_a_dead_end_finishes_with_a_clear_reason(llm):
    result = llm("x", grammar='root ::= "a" "\\x00"', max_tokens=8)
    assert result["choices"][0]["finish_reason"] == "no_legal_token" and result["choices"][0]["text"] == "a"


def test_state_arrays_are_llama_cpp_shaped(llm):
    state = llm.save_state()
    assert state.input_ids.dtype == np.intc


@pytest.mark.real_model
@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.8, "seed": 7}], ids=["greedy", "seeded"])
@pytest.mark.parametrize("n_seq_max", [1, 4])
def test_two_streams_read_in_turn_on_one_thread_each_answer_as_alone(demo_model, n_seq_max, sampling):
    """Two create_completion(stream=True) read a chunk at a time in turn: each stream's
    chunks (text and logprobs) are those it gives alone."""
    prompts = ["The capital of France is", "def fibonacci(n):\n"]
    options = dict(max_tokens=16, logprobs=1, stream=True, **sampling)
    with river_cpp.Llama(model_path=str(demo_model), n_ctx=N_CTX, n_threads=2, verbose=False) as llm:
        want = []
        for prompt in prompts:
            llm.reset()
            want.append([chunk["choices"] for chunk in llm.create_completion(prompt, **options)])
    with river_cpp.Llama(
        model_path=str(demo_model), n_ctx=N_CTX, n_threads=2, n_seq_max=n_seq_max, verbose=False
    ) as llm:
        streams = [llm.create_completion(prompt, **options) for prompt in prompts]
        got = read_in_turn(streams, lambda chunk: chunk["choices"])
    assert got == want and all(len(chunks) > 1 for chunks in want)
