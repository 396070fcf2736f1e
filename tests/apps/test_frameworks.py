"""The frameworks users reach llama-cpp-python through, run unchanged on river_cpp.Llama
(through river_cpp.patch_llama_cpp(), or the instance handed over), each flow compared
with the same flow on llama_cpp.Llama, greedy, on the demo model's F16 backbone.

Needs the `[compat]` extra (pip install ".[compat]" -c constraints with
llama-cpp-python==0.3.36); a framework that is not installed is skipped, saying so.
Kept cheap: a few short generations per framework.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

import river_cpp

llama_cpp = pytest.importorskip("llama_cpp")
pydantic = pytest.importorskip("pydantic")

pytestmark = [pytest.mark.slow, pytest.mark.real_model]

N_CTX = 512
QUESTION = "What is the capital of France? Answer in one word."


class City(pydantic.BaseModel):
    name: str
    country: str


@pytest.fixture(scope="module")
def rope_freq_base(model_path) -> float:
    """The GGUF's RoPE base: LangChain passes 10000.0 by default, which llama-cpp-python
    applies (river-cpp keeps the GGUF's, with a warning), so the comparison names the
    file's own."""
    from river_cpp.engine.files.gguf_info import read_gguf_info

    info = read_gguf_info(model_path)
    return float(info.get(f"{info.arch}.rope.freq_base", 10000.0))


@pytest.fixture(scope="module")
def model_path(demo_backbone: Path, tmp_path_factory) -> str:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield str(demo_backbone)


def both(flow: Callable[[], Any]) -> tuple[Any, Any]:
    """flow() with llama-cpp-python's Llama, then with river-cpp's (patched in)."""
    reference = flow()
    with river_cpp.patch_llama_cpp() as patch:
        assert llama_cpp.Llama is river_cpp.Llama and patch.original is not river_cpp.Llama
        ours = flow()
    assert llama_cpp.Llama is not river_cpp.Llama
    return reference, ours


def framework(module: str) -> Any:
    return pytest.importorskip(module, reason=f"{module} is not installed: pip install '.[compat]'")


# ---------------------------------------------------------------- LangChain


def test_langchain_llamacpp_invoke_and_stream(model_path, rope_freq_base):
    llms = framework("langchain_community.llms")

    def flow():
        llm = llms.LlamaCpp(
            model_path=model_path,
            n_ctx=N_CTX,
            temperature=0,
            max_tokens=16,
            verbose=False,
            rope_freq_base=rope_freq_base,
        )
        out = (type(llm.client), llm.invoke("The capital of France is"), "".join(llm.stream("The river flows")))
        llm.client.close()
        return out

    (reference_type, *reference), (ours_type, *ours) = both(flow)
    assert reference_type is llama_cpp.llama.Llama and ours_type is river_cpp.Llama
    assert ours == reference and all(reference)


def test_langchain_chatllamacpp_invoke_structured_output_and_tools(model_path, rope_freq_base):
    chat_models = framework("langchain_community.chat_models")

    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    def flow():
        chat = chat_models.ChatLlamaCpp(
            model_path=model_path,
            n_ctx=N_CTX,
            temperature=0,
            max_tokens=40,
            verbose=False,
            rope_freq_base=rope_freq_base,
        )
        text = chat.invoke([("user", QUESTION)]).content
        city = chat.with_structured_output(City).invoke("Paris is a city in France. Extract the city.")
        named = {"type": "function", "function": {"name": "get_weather"}}
        message = chat.bind_tools([get_weather], tool_choice=named).invoke("Weather in Paris?")
        chat.client.close()
        return text, city, message.content, [(call["name"], call["args"]) for call in message.tool_calls]

    reference, ours = both(flow)
    assert ours == reference
    assert isinstance(ours[1], City) and ours[3] and ours[3][0][0] == "get_weather"


def test_langchain_embeddings_equal_llama_cpp_vectors(model_path):
    embeddings = framework("langchain_community.embeddings")
    np = pytest.importorskip("numpy")

    def flow():
        embedder = embeddings.LlamaCppEmbeddings(model_path=model_path, n_ctx=N_CTX, verbose=False)
        out = embedder.embed_documents(["A river flows.", "Paris is in France."]), embedder.embed_query("rivers")
        embedder.client.close()
        return out

    (reference_docs, reference_query), (ours_docs, ours_query) = both(flow)
    np.testing.assert_allclose(ours_docs, reference_docs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours_query, reference_query, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- LlamaIndex


def test_llama_index_complete_stream_and_metadata(model_path):
    base = framework("llama_index.llms.llama_cpp")

    def flow():
        llm = base.LlamaCPP(
            model_path=model_path,
            temperature=0.0,
            max_new_tokens=16,
            context_window=N_CTX,
            model_kwargs={"n_gpu_layers": 0},
            verbose=False,
        )
        text = llm.complete("The capital of France is").text
        streamed = [r.delta for r in llm.stream_complete("The river flows")]
        meta = llm.metadata
        llm._model.close()
        return text, "".join(streamed), meta.context_window, meta.num_output

    reference, ours = both(flow)
    assert ours == reference and ours[2] == N_CTX


# ---------------------------------------------------------------- Haystack


def test_haystack_chat_generator(model_path):
    chat = framework("haystack_integrations.components.generators.llama_cpp")
    dataclasses = framework("haystack.dataclasses")

    def flow():
        generator = chat.LlamaCppChatGenerator(
            model=model_path, n_ctx=N_CTX, generation_kwargs={"max_tokens": 16, "temperature": 0.0}
        )
        generator.warm_up()
        replies = generator.run([dataclasses.ChatMessage.from_user(QUESTION)])["replies"]
        generator.close()
        return [r.text for r in replies]

    reference, ours = both(flow)
    assert ours == reference and ours[0]


# ---------------------------------------------------------------- outlines and instructor (given the instance)


@pytest.fixture(scope="module")
def pair(model_path):
    reference = llama_cpp.Llama(model_path=model_path, n_ctx=N_CTX, verbose=False)
    ours = river_cpp.Llama(model_path=model_path, n_ctx=N_CTX, verbose=False)
    yield reference, ours
    ours.close()
    reference.close()


def test_outlines_json_schema_generator(pair):
    outlines = framework("outlines")
    prompt = "Name a city and its country, as JSON."
    texts = [outlines.from_llamacpp(llm)(prompt, City, max_tokens=40, temperature=0) for llm in pair]
    assert texts[1] == texts[0]
    City.model_validate_json(texts[1])


def test_outlines_regex_generator_on_plain_prompts(pair):
    outlines = framework("outlines")
    types = framework("outlines.types")
    pattern = types.Regex(r"[0-9]{4}")
    texts = [
        outlines.from_llamacpp(llm, chat_mode=False)(
            "The year the Eiffel Tower opened:", pattern, max_tokens=8, temperature=0
        )
        for llm in pair
    ]
    assert texts[1] == texts[0] and len(texts[1]) == 4 and texts[1].isdigit()


def test_instructor_pydantic_model(pair):
    """instructor's JSON_SCHEMA mode sends OpenAI's json_schema response_format, which
    llama-cpp-python does not constrain by (it reads {"type": "json_object", "schema"}),
    so on this model its flow runs to max_tokens; river-cpp constrains by the schema.
    The comparison: the reply equals llama-cpp-python's under its form of the same schema."""
    instructor = framework("instructor")
    reference, ours = pair
    sent = []

    def create(*args, **kwargs):
        sent.append(kwargs)
        return ours.create_chat_completion_openai_v1(*args, **kwargs)

    messages = [{"role": "user", "content": "Paris is a city in France. Extract the city as JSON."}]
    city = instructor.patch(create=create, mode=instructor.Mode.JSON_SCHEMA)(
        messages=messages, response_model=City, max_tokens=60, temperature=0, max_retries=0
    )
    assert isinstance(city, City)
    request = sent[-1]
    schema = request["response_format"]["json_schema"]["schema"]
    expected = reference.create_chat_completion(
        request["messages"],
        response_format={"type": "json_object", "schema": schema},
        max_tokens=60,
        temperature=0,
    )
    assert City.model_validate_json(expected["choices"][0]["message"]["content"]).model_dump() == city.model_dump()


def test_embeddings_equal_llama_cpp_vectors(model_path):
    np = pytest.importorskip("numpy")
    texts = ["A river flows to the sea.", "Paris is in France."]
    with river_cpp.Llama(model_path=model_path, n_ctx=N_CTX, embedding=True, verbose=False) as ours:
        got = ours.create_embedding(texts)
        normalized = ours.embed(texts[0], normalize=True)
    reference = llama_cpp.Llama(model_path=model_path, n_ctx=N_CTX, embedding=True, verbose=False)
    expected = reference.create_embedding(texts)
    expected_normalized = reference.embed(texts[0], normalize=True)
    reference.close()
    assert got["usage"] == expected["usage"] and [d["index"] for d in got["data"]] == [0, 1]
    for a, b in zip(got["data"], expected["data"]):
        np.testing.assert_allclose(a["embedding"], b["embedding"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(normalized, expected_normalized, rtol=1e-5, atol=1e-6)
    assert json.dumps(got)  # plain JSON, as the server sends it
