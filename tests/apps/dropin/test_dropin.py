"""river_cpp.Llama as frameworks use it, on tiny models: the keyword sets they pass,
the members they read, seeds and top_k as llama-cpp-python means them, logits
processors and stopping criteria, n choices, tools on a template without a tool
syntax, the low-level eval / sample / generate, and verbose output on stderr."""

from __future__ import annotations

import ast
import json
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

import river_cpp
from river_cpp import Speculative
from river_cpp._child import python_command
from river_cpp.apps.dropin import compat as llama_compat
from river_cpp.engine.files.gguf_info import read_gguf_info

N_CTX = 256


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture
def fresh_warnings(monkeypatch):
    """A process that has warned of no keyword yet."""
    monkeypatch.setattr(llama_compat, "_warned", set())


@pytest.fixture(scope="module")
def llm(tiny_llama: Path):
    """A model whose chat template (the demo model's) has no tool-call syntax."""
    with river_cpp.Llama(model_path=str(tiny_llama), n_ctx=N_CTX, n_threads=1, verbose=False) as llm:
        yield llm


# The constructor keywords each framework passes (their own defaults), as of the
# versions pinned by the [compat] extra.
FRAMEWORK_KEYWORDS = {
    "langchain LlamaCpp": dict(
        lora_base=None,
        lora_path=None,
        n_ctx=N_CTX,
        n_parts=-1,
        seed=-1,
        f16_kv=True,
        logits_all=False,
        vocab_only=False,
        use_mlock=False,
        n_threads=1,
        n_batch=8,
        use_mmap=True,
        last_n_tokens_size=64,
        verbose=False,
        rope_freq_scale=1.0,
        rope_freq_base=10000.0,  # the tiny files' own base
    ),
    "langchain LlamaCppEmbeddings": dict(
        embedding=True,
        n_ctx=N_CTX,
        n_parts=-1,
        seed=-1,
        f16_kv=False,
        logits_all=False,
        vocab_only=False,
        use_mlock=False,
        n_threads=None,
        n_batch=512,
        verbose=False,
        device=None,
    ),
    "langchain ChatLlamaCpp": dict(
        n_ctx=N_CTX, n_parts=-1, seed=-1, f16_kv=True, rope_freq_scale=1.0, rope_freq_base=0.0, n_batch=8, verbose=False
    ),
    "llama-index LlamaCPP": dict(n_ctx=N_CTX, verbose=False, n_gpu_layers=0),
    "outlines": dict(n_ctx=0, verbose=False),
}


@pytest.mark.parametrize("framework", FRAMEWORK_KEYWORDS)
def test_every_framework_keyword_set_constructs_without_a_warning(tiny_llama, framework, fresh_warnings):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with river_cpp.Llama(model_path=str(tiny_llama), **FRAMEWORK_KEYWORDS[framework]) as llm:
            if llm.context_params.embeddings:
                assert len(llm.embed("The river")) > 0
            else:
                assert llm("The river", max_tokens=3)["choices"][0]["text"] is not None


def test_speed_only_keywords_are_named_in_one_warning_once_per_process(tiny_llama, fresh_warnings):
    speed = dict(flash_attn=True, use_mlock=True, offload_kqv=False, n_batch=64, no_such_keyword=1)
    with pytest.warns(UserWarning) as caught:
        llm = river_cpp.Llama(model_path=str(tiny_llama), n_ctx=N_CTX, verbose=False, **speed)
    llm.close()
    assert len(caught) == 1
    message = str(caught[0].message)
    for name in ("flash_attn", "use_mlock", "offload_kqv", "no_such_keyword"):
        assert name in message
    assert "n_batch" not in message  # sizing is not "ignored": it shows in context_params
    # the next construction (a framework makes one per chain) names only what is new
    with pytest.warns(UserWarning) as caught:
        river_cpp.Llama(model_path=str(tiny_llama), n_ctx=N_CTX, verbose=False, numa=True, **speed).close()
    assert len(caught) == 1 and "numa" in str(caught[0].message) and "flash_attn" not in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        river_cpp.Llama(model_path=str(tiny_llama), n_ctx=N_CTX, verbose=False, numa=True, **speed).close()


class _Header:
    """The part of a GGUF header check_rope reads: a RoPE base of 100000."""

    arch = "llama"

    def get(self, key: str, default=None):
        return {"llama.rope.freq_base": 100000.0}.get(key, default)


def test_langchains_rope_freq_base_is_named_once_per_process(fresh_warnings):
    with pytest.warns(UserWarning, match="rope_freq_base"):
        llama_compat.check_rope(_Header(), {"rope_freq_base": llama_compat.LANGCHAIN_ROPE_FREQ_BASE})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        llama_compat.check_rope(_Header(), {"rope_freq_base": llama_compat.LANGCHAIN_ROPE_FREQ_BASE})
    with pytest.raises(ValueError, match="rope_freq_base"):
        llama_compat.check_rope(_Header(), {"rope_freq_base": 5000.0})


def test_rope_equal_to_the_gguf_is_accepted(tiny_llama):
    info = read_gguf_info(tiny_llama)
    base = info.get(f"{info.arch}.rope.freq_base", 10000.0)
    with river_cpp.Llama(
        model_path=str(tiny_llama), n_ctx=N_CTX, verbose=False, rope_freq_base=base, rope_freq_scale=1.0
    ) as llm:
        assert llm.context_params.rope_freq_base == pytest.approx(base)


def test_n_ctx_zero_is_the_training_context_capped_by_memory(tiny_llama, monkeypatch):
    info = read_gguf_info(tiny_llama)
    trained = info.get(f"{info.arch}.context_length")
    with river_cpp.Llama(model_path=str(tiny_llama), n_ctx=0, verbose=False) as llm:
        assert llm.n_ctx() == trained == llm.context_params.n_ctx
    monkeypatch.setattr(llama_compat, "_available_memory", lambda: 1024)  # 1 KiB free: the floor of 512 tokens
    with pytest.warns(UserWarning, match="n_ctx=0"):
        capped = llama_compat.training_context(info, verbose=False)
    assert 0 < capped < trained


def test_members_frameworks_read(llm, tiny_llama):
    assert llm.context_params.n_ctx == llm.n_ctx() == N_CTX
    assert llm.context_params.n_batch == llm.n_batch and llm.n_threads == llm.context_params.n_threads == 1
    assert llm.model_params.use_mmap is True and llm.model_params.n_gpu_layers == 0
    info = read_gguf_info(tiny_llama)
    assert llm.metadata["general.architecture"] == info.arch
    assert llm.metadata[f"{info.arch}.context_length"] == str(info.get(f"{info.arch}.context_length"))
    assert all(isinstance(v, str) for v in llm.metadata.values())
    tokenizer = llm.tokenizer()
    assert tokenizer is llm.tokenizer_
    ids = tokenizer.encode("Hello river", add_bos=False)
    assert ids == llm.tokenize(b"Hello river", add_bos=False, special=True)
    assert tokenizer.decode(ids) == "Hello river" and tokenizer.detokenize(ids) == b"Hello river"


def test_seed_minus_one_is_random_and_top_k_zero_or_less_is_off(llm, tiny_llama):
    options = dict(max_tokens=8, temperature=1.0, top_p=1.0, min_p=0.0)
    assert llm("Once", seed=-1, **options)["choices"][0]["text"] is not None
    assert llm("Once", seed=5, top_k=-1, **options)["choices"] == llm("Once", seed=5, top_k=0, **options)["choices"]
    with river_cpp.Llama(model_path=str(tiny_llama), n_ctx=N_CTX, seed=-1, verbose=False) as random_seeded:
        assert random_seeded("Once", **options)["choices"][0]["text"] is not None


def test_calls_without_a_seed_sample_the_same_on_every_run(tiny_llama):
    # llama-cpp-python 0.3.36: the constructor's seed (-1 here, LangChain's) starts a fixed
    # sequence, and each call without a seed takes the next one.
    code = (
        "import sys, river_cpp\n"
        "llm = river_cpp.Llama(model_path=sys.argv[1], n_ctx=64, n_threads=1, seed=-1, verbose=False)\n"
        "print(repr([llm('Once', max_tokens=8, temperature=1.0)['choices'][0]['text'] for _ in range(2)]))"
    )
    runs = [
        subprocess.run(python_command(code, str(tiny_llama)), capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    first, second = ast.literal_eval(runs[0])
    assert first != second  # the second call took the next seed


def _only(token: int):
    def processor(input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        assert input_ids.dtype == np.intc and scores.dtype == np.float32
        out = np.full_like(scores, -np.inf)
        out[token] = 0.0
        return out

    return processor


def test_a_logits_processor_decides_each_token_and_drafting_says_it_stepped_aside(llm):
    token = llm.tokenize(b" river", add_bos=False)[0]
    forced = llm("The", max_tokens=5, temperature=0, logits_processor=[_only(token)], speculative=Speculative())
    assert forced["usage"]["completion_tokens"] == 5
    assert forced["choices"][0]["text"] == " river" * 5
    assert "logits_processor" in forced["usage"]["river"]["plain_decoding"]
    plain = llm("The", max_tokens=5, temperature=0, logits_processor=[_only(token)], speculative=False)
    assert "plain_decoding" not in plain["usage"]["river"]  # it did not draft anyway
    streamed = llm("The", max_tokens=3, temperature=0, logits_processor=_only(token), stream=True)
    assert "".join(c["choices"][0]["text"] for c in streamed) == " river" * 3


def test_a_stopping_criterion_ends_before_the_token_it_sees(llm):
    n_prompt = len(llm.tokenize(b"The river", add_bos=True, special=True))
    seen = []

    def three(input_ids, logits):
        seen.append(len(input_ids))
        return len(input_ids) >= n_prompt + 3

    free = llm("The river", max_tokens=8, temperature=0, logit_bias={llm.token_eos(): -100.0})
    out = llm("The river", max_tokens=8, temperature=0, stopping_criteria=[three], logit_bias={llm.token_eos(): -100.0})
    assert out["choices"][0]["finish_reason"] == "stop" and out["usage"]["completion_tokens"] == 3
    assert seen == [n_prompt, n_prompt + 1, n_prompt + 2, n_prompt + 3]
    assert free["choices"][0]["text"].startswith(out["choices"][0]["text"])


def test_n_choices_are_the_seeded_single_calls(llm):
    options = dict(max_tokens=6, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    three = llm("Once upon", n=3, seed=7, **options)
    assert [c["index"] for c in three["choices"]] == [0, 1, 2]
    for i, choice in enumerate(three["choices"]):
        assert choice["text"] == llm("Once upon", seed=7 + i, **options)["choices"][0]["text"]
    assert three["usage"]["completion_tokens"] == sum(
        llm("Once upon", seed=7 + i, **options)["usage"]["completion_tokens"] for i in range(3)
    )
    chunks = list(llm("Once upon", n=2, seed=7, stream=True, **options))
    for i in range(2):
        text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"] and c["choices"][0]["index"] == i)
        assert text == three["choices"][i]["text"]
    chat = llm.create_chat_completion([{"role": "user", "content": "Hi"}], n=2, seed=3, max_tokens=4)
    assert [c["index"] for c in chat["choices"]] == [0, 1]
    with pytest.raises(ValueError, match="n must be"):
        llm("x", n=0)


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"unit": {"enum": ["c", "f"]}, "days": {"type": "integer"}},
            "required": ["unit", "days"],
        },
    },
}
CLOCK = {"type": "function", "function": {"name": "now"}}
MESSAGES = [{"role": "user", "content": "Weather?"}]


def test_tools_on_a_template_without_a_tool_syntax(llm):
    named = llm.create_chat_completion(
        MESSAGES,
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=60,
        temperature=0,
    )
    choice = named["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]["function"]
    arguments = json.loads(call["arguments"])
    assert call["name"] == "get_weather" and arguments["unit"] in ("c", "f") and isinstance(arguments["days"], int)
    assert choice["message"]["function_call"] == call
    required = llm.create_chat_completion(
        MESSAGES, tools=[WEATHER, CLOCK], tool_choice="required", max_tokens=60, temperature=0
    )
    call = required["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] in ("get_weather", "now") and isinstance(json.loads(call["arguments"]), dict)
    legacy = llm.create_chat_completion(
        MESSAGES, functions=[WEATHER["function"]], function_call={"name": "get_weather"}, max_tokens=60, temperature=0
    )
    assert legacy["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    auto = llm.create_chat_completion(MESSAGES, tools=[WEATHER], tool_choice="auto", max_tokens=8, temperature=0)
    plain = llm.create_chat_completion(MESSAGES, max_tokens=8, temperature=0)
    assert auto["choices"][0]["message"] == plain["choices"][0]["message"]  # text, as with no tools
    chunks = list(
        llm.create_chat_completion(
            MESSAGES,
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=60,
            temperature=0,
            stream=True,
        )
    )
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    streamed = "".join(d["tool_calls"][0]["function"].get("arguments", "") for d in deltas if d.get("tool_calls"))
    assert json.loads(streamed) == json.loads(named["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])


def test_eval_of_several_tokens_is_a_prompt_and_of_one_a_step(llm, monkeypatch):
    seen = []
    forward = llm._model.forward

    def spy(ids, **options):
        seen.append((len(ids), options.get("prompt", False)))
        return forward(ids, **options)

    monkeypatch.setattr(llm._model, "forward", spy)
    llm.reset()
    llm.eval(llm.tokenize(b"The river flows"))
    llm.eval([llm.sample(temp=0)])
    assert [prompt for _, prompt in seen] == [True, False] and seen[0][0] > 1
    llm.reset()


def test_eval_sample_generate_are_plain_greedy_decoding(llm):
    prompt = llm.tokenize(b"The river flows")
    reference = llm(prompt, max_tokens=6, temperature=0, speculative=False, logit_bias={llm.token_eos(): -100.0})
    llm.reset()
    llm.eval(prompt)
    assert llm.n_tokens == len(prompt) and llm.scores.shape == (1, llm.n_vocab())
    first = llm.sample(temp=0)
    generated = []
    for token in llm.generate(prompt, temp=0, logits_processor=[_ban(llm.token_eos())]):
        generated.append(token)
        if len(generated) == 6:
            break
    assert first == generated[0]
    assert llm.detokenize(generated).decode() == reference["choices"][0]["text"]
    # a second generate reuses the cached prefix and gives the same tokens
    again = []
    for token in llm.generate(prompt, temp=0, logits_processor=[_ban(llm.token_eos())]):
        again.append(token)
        if len(again) == 6:
            break
    assert again == generated
    llm.reset()
    with pytest.raises(RuntimeError, match="eval"):
        llm.sample()


def _ban(token: int):
    def processor(input_ids, scores):
        scores = scores.copy()
        scores[token] = -np.inf
        return scores

    return processor


def test_openai_v1_types_and_set_cache(llm):
    openai = pytest.importorskip("openai")
    reply = llm.create_chat_completion_openai_v1(messages=MESSAGES, max_tokens=4)
    assert isinstance(reply, openai.types.chat.ChatCompletion) and reply.choices[0].message.role == "assistant"
    chunks = list(llm.create_chat_completion_openai_v1(messages=MESSAGES, max_tokens=4, stream=True))
    assert all(isinstance(c, openai.types.chat.ChatCompletionChunk) for c in chunks)
    llm.set_cache(None)
    with pytest.warns(UserWarning, match="prompt cache"):
        llm.set_cache(object())
    llm.set_cache(None)


def test_verbose_writes_nothing_to_stdout(tiny_llama, capfd):
    with river_cpp.Llama(model_path=str(tiny_llama), n_ctx=N_CTX, verbose=True) as llm:
        llm("The river", max_tokens=3)
        llm.create_chat_completion(MESSAGES, max_tokens=3)
    out, err = capfd.readouterr()
    assert out == ""
    assert err  # it did say something, where llama-cpp-python says it


def test_embeddings_need_embedding_true(llm):
    with pytest.raises(RuntimeError, match="embedding=True"):
        llm.embed("hello")


def test_a_half_read_stream_dropped_in_one_thread_frees_the_model_for_others(llm):
    import gc
    import threading

    def half_read():
        stream = llm("The river", max_tokens=32, stream=True)
        next(stream)  # holds the model's lock from here
        chat = llm.create_chat_completion(MESSAGES, max_tokens=8, stream=True)
        next(chat)
        del stream, chat  # dropped without being read to the end

    worker = threading.Thread(target=half_read)
    worker.start()
    worker.join(30)
    gc.collect()
    done = []
    other = threading.Thread(target=lambda: done.append(llm("The river", max_tokens=2)))
    other.start()
    other.join(30)
    assert done and done[0]["choices"], "another thread's call waited on a dropped stream"


def test_pickle_reloads_and_the_static_helpers(llm):
    import pickle

    again = pickle.loads(pickle.dumps(llm))
    try:
        assert again.n_ctx() == llm.n_ctx() and again.model_path == llm.model_path
        greedy = dict(max_tokens=4, temperature=0)
        assert again("The river", **greedy)["choices"][0]["text"] == llm("The river", **greedy)["choices"][0]["text"]
    finally:
        again.close()
    logprobs = river_cpp.Llama.logits_to_logprobs(np.array([[1.0, 2.0, 3.0]]))
    assert np.allclose(np.exp(logprobs).sum(axis=-1), 1.0) and logprobs.dtype == np.float32
    assert river_cpp.Llama.longest_token_prefix([1, 2, 3], [1, 2, 4]) == 2


def test_a_chat_format_of_the_files_family_renders_the_files_template(tiny_llama, llm):
    with river_cpp.Llama(model_path=str(tiny_llama), n_ctx=N_CTX, chat_format="chatml", verbose=False) as chatml:
        greedy = dict(max_tokens=6, temperature=0)
        ours = chatml.create_chat_completion(MESSAGES, **greedy)["choices"][0]["message"]
        assert ours == llm.create_chat_completion(MESSAGES, **greedy)["choices"][0]["message"]
    assert llama_compat.chat_template_of("chatml", None) == llama_compat.CHATML_TEMPLATE  # a file without one
    with pytest.raises(ValueError, match="llama-3"):
        llama_compat.chat_template_of("llama-3", "<|im_start|>{{ messages }}")


def test_an_embedding_model_embeds_and_tokenizes_without_loading_a_generating_one(tiny_llama):
    import llama_cpp.llama

    with river_cpp.Llama(model_path=str(tiny_llama), n_ctx=N_CTX, embedding=True, verbose=False) as llm:
        vectors = llm.embed(["A river.", "The sea."], normalize=True)
        ids = llm.tokenize(b"A river.")
        assert llm._river is None  # nothing generating was loaded
        reference = llama_cpp.llama.Llama(model_path=str(tiny_llama), n_ctx=N_CTX, embedding=True, verbose=False)
        try:
            np.testing.assert_allclose(vectors, reference.embed(["A river.", "The sea."], normalize=True), rtol=1e-5)
            assert ids == reference.tokenize(b"A river.")
        finally:
            reference.close()
        assert llm("The river", max_tokens=2)["choices"]  # generation loads the model on first use


@pytest.mark.parametrize("given, name", [(8, "q8_0"), ("q8_0", "q8_0"), (1, "f16"), (None, "f16")])
def test_type_k_and_type_v_choose_the_kv_caches_types(tiny_llama_h32, given, name):
    """llama-cpp-python's GGML_TYPE numbers (Q8_0 is 8) or names, without a warning;
    context_params gives the numbers back."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        llm = river_cpp.Llama(
            model_path=str(tiny_llama_h32), n_ctx=N_CTX, verbose=False, type_k=given, type_v=given, own_attention=True
        )
    with llm:
        llm("The river", max_tokens=2)
        engine = llm.river_model.engine
        assert (engine.type_k, engine.type_v) == (name, name)
        assert llm.context_params.type_k == llm.context_params.type_v == {"f16": 1, "q8_0": 8}[name]


def test_a_kv_cache_type_it_cannot_serve_is_refused(tiny_llama_h32):
    with pytest.raises(ValueError, match="type_v must be one of 'f16' \\(1\\), 'q8_0' \\(8\\)"):
        river_cpp.Llama(model_path=str(tiny_llama_h32), n_ctx=N_CTX, verbose=False, type_v=2)
