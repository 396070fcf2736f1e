"""river_cpp.apps.server.app: a live server on loopback (an ephemeral port, uvicorn in a thread)
driven by the real `openai` client and by raw HTTP for what a client library hides
(Host headers, disconnects, queue-full, malformed bodies).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from river_cpp import RiverModel  # noqa: E402
from river_cpp.apps.server import ServerConfig, build, make_server  # noqa: E402
from river_cpp.decoding.speculative import Speculative  # noqa: E402
from river_cpp.engine.compute.policy import ExitPolicy  # noqa: E402

pytestmark = pytest.mark.server

MODEL_ID = "tiny"
N_CTX = 256


@pytest.fixture(scope="module")
def model(tiny_llama4: Path, tmp_path_factory) -> RiverModel:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        with RiverModel(tiny_llama4, n_ctx=N_CTX, n_threads=2, progress=False) as model:
            yield model


@contextmanager
def live_server(load, **options):
    """A server on 127.0.0.1:<ephemeral>; yields its url, port and worker."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = ServerConfig(port=port, keepalive_seconds=options.pop("keepalive_seconds", 0.5), **options)
    app, worker = build(load, config, MODEL_ID)
    server = make_server(app, config, log_level="warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield SimpleNamespace(url=f"http://127.0.0.1:{port}", port=port, worker=worker)
    finally:
        server.should_exit = True
        thread.join(10)
        worker.stop()
        sock.close()


@pytest.fixture(scope="module")
def server(model):
    with live_server(lambda: model) as live:
        assert live.worker.ready.wait(10)
        yield live


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=30)


def request(
    port: int, method: str, path: str, body: Any = None, *, headers: Optional[dict] = None, raw: Optional[bytes] = None
) -> tuple[int, dict, Any]:
    """(status, headers, parsed JSON or text) of one raw HTTP request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    text = response.read().decode()
    conn.close()
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = text
    return response.status, {k.lower(): v for k, v in response.getheaders()}, parsed


# ---------------------------------------------------------------- `river-cpp serve`'s defaults


def served_by_the_command(monkeypatch, argv: list) -> Any:
    """What `river-cpp serve ARGV` would serve: its model loader (uvicorn is not started)."""
    import river_cpp.apps.server as server_package
    from river_cpp.apps.cli import main

    captured = {}
    monkeypatch.setattr(server_package, "serve", lambda load, config, model_id: captured.update(load=load))
    assert main(["serve", *argv, "--n-ctx", str(N_CTX), "-t", "1"]) == 0
    return captured["load"]


def test_serve_tau_serves_lossy_tau_output(tiny_llama4, river_cache, monkeypatch):
    """A request without a `river` field decodes as `serve --tau` asked: plainly, with
    River's exits (tau -1: every decoded token leaves at the first check), not drafted."""
    load = served_by_the_command(monkeypatch, ["--model", str(tiny_llama4), "--tau", "-1", "--min-layer", "1"])
    with live_server(load) as live:
        assert live.worker.ready.wait(30)
        body = {"prompt": "The quick brown fox", "max_tokens": 5, "temperature": 0}
        status, _, answer = request(live.port, "POST", "/v1/completions", body)
        model = live.worker.model
        assert status == 200, answer
        river = answer["usage"]["river"]
        assert "speculative" not in river  # not drafted and verified: lossy
        assert river["exit_histogram"][1] == answer["usage"]["completion_tokens"] - 1  # the first comes from the prompt
        lossy = model.create_completion(
            "The quick brown fox", max_tokens=5, temperature=0, policy=ExitPolicy.uniform(-1.0, min_layer=1)
        )
        assert answer["choices"][0]["text"] == lossy["choices"][0]["text"]


def test_serve_without_a_river_serves_ngram_drafts(tiny_llama4, river_cache, monkeypatch):
    """`serve --river none`: requests without a `river` field are drafted by n-gram
    matches (the default draft without a river) and answer the backbone's tokens."""
    load = served_by_the_command(monkeypatch, ["--model", str(tiny_llama4), "--river", "none"])
    with live_server(load) as live:
        assert live.worker.ready.wait(30)
        body = {"prompt": "one two three one two three one two", "max_tokens": 6, "temperature": 0}
        status, _, answer = request(live.port, "POST", "/v1/completions", body)
        model = live.worker.model
        assert status == 200, answer
        assert model.speculative == Speculative(draft="ngram")
        assert answer["usage"]["river"]["speculative"]["rounds"] > 0
        plain = model.create_completion(body["prompt"], max_tokens=6, temperature=0, speculative=False)
        assert answer["choices"][0]["text"] == plain["choices"][0]["text"]


# ---------------------------------------------------------------- the openai client


def test_completion_through_the_openai_client(client, model):
    response = client.completions.create(model=MODEL_ID, prompt="The quick brown fox", max_tokens=8, temperature=0)
    expected = model.create_completion("The quick brown fox", max_tokens=8, temperature=0)
    assert response.object == "text_completion"
    assert response.choices[0].text == expected["choices"][0]["text"]
    assert response.choices[0].finish_reason in ("stop", "length")
    usage = response.model_dump()["usage"]
    assert usage["completion_tokens"] == expected["usage"]["completion_tokens"]
    assert usage["prompt_tokens"] == expected["usage"]["prompt_tokens"]
    river = usage["river"]
    assert river["n_layer"] == model.n_layer
    assert sum(river["exit_histogram"]) == usage["completion_tokens"]


def test_chat_streaming_and_usage_through_the_openai_client(client):
    messages = [{"role": "user", "content": "Tell me about rivers."}]
    whole = client.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=12, temperature=0)
    assert whole.object == "chat.completion"
    assert whole.choices[0].message.role == "assistant"
    chunks = list(
        client.chat.completions.create(
            model=MODEL_ID,
            messages=messages,
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].model_dump()["usage"]["river"]["mean_exit_layer"] is not None


def test_river_extension_field(client, model):
    policy = model.policy
    response = client.chat.completions.create(
        model=MODEL_ID,
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=6,
        temperature=0,
        extra_body={"river": {"speculative": True}},
    )
    river = response.model_dump()["usage"]["river"]
    assert river["speculative"]["drafted"] >= river["speculative"]["accepted"] >= 0
    assert set(river["exit_histogram"][:-1]) == {0}  # verified tokens are the backbone's
    response = client.completions.create(
        model=MODEL_ID, prompt="Hi", max_tokens=4, temperature=0, extra_body={"river": {"exit_layer": 2}}
    )
    histogram = response.model_dump()["usage"]["river"]["exit_histogram"]
    assert histogram[2] == response.usage.completion_tokens - 1  # the first token comes from the prompt
    assert model.policy == policy  # the server's policy is back
    with pytest.raises(openai.BadRequestError, match="river"):
        client.completions.create(model=MODEL_ID, prompt="Hi", extra_body={"river": {"tau": 0.9, "exit_layer": 1}})


def test_models_and_health(client, server, model):
    (entry,) = client.models.list().data
    assert entry.id == MODEL_ID  # the name given to build(): --alias, or the file's name
    assert entry.model_dump()["river"] == {"n_layer": model.n_layer, "n_ctx": N_CTX, "has_river": model.has_river}
    status, _, body = request(server.port, "GET", "/health")
    assert status == 200 and body["status"] == "ok"
    slots = getattr(model, "n_seq_max", 1)  # the word the startup line uses too
    assert body["slots_idle"] + body["slots_processing"] == slots and body["queued"] >= body["slots_processing"]


def test_context_overflow_is_a_400_with_token_counts(client, server):
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=MODEL_ID, prompt=list(range(100, 100 + N_CTX)), max_tokens=4)
    error = caught.value.body
    assert error["code"] == "context_length_exceeded"
    assert error["prompt_tokens"] == N_CTX and error["n_ctx"] == N_CTX


def test_max_tokens_is_clamped_to_what_fits(client):
    response = client.completions.create(
        model=MODEL_ID, prompt=list(range(100, 100 + N_CTX - 3)), max_tokens=100, temperature=0
    )
    assert response.usage.completion_tokens <= 3
    assert response.choices[0].finish_reason in ("length", "stop")


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "path, body, param",
    [
        ("/v1/completions", {"prompt": "x", "temperature": "hot"}, "temperature"),
        ("/v1/completions", {"prompt": "x", "river": {"model": "/etc/passwd"}}, "river"),
        ("/v1/chat/completions", {"messages": []}, "messages"),
    ],
)
def test_invalid_fields_get_openai_errors(server, path, body, param):
    # Every field's rule is tested in tests/apps/server/test_protocol.py; here, that the
    # errors reach a client as OpenAI's JSON.
    code, _, answer = request(server.port, "POST", path, body)
    assert code == 400
    assert set(answer["error"]) >= {"message", "type", "param", "code"}
    assert answer["error"]["param"] == param


def test_a_request_naming_another_model_is_served_by_the_one_model(client, server, model):
    response = client.completions.create(model="gpt-4o", prompt="The quick brown fox", max_tokens=4, temperature=0)
    expected = model.create_completion("The quick brown fox", max_tokens=4, temperature=0)
    assert response.model == MODEL_ID  # the answer says which model answered
    assert response.choices[0].text == expected["choices"][0]["text"]
    status, _, answer = request(server.port, "POST", "/v1/completions", {"prompt": "x", "model": "/a.gguf"})
    assert status == 200 and answer["model"] == MODEL_ID


def test_invalid_json_bad_messages_and_unknown_routes(server):
    status, _, answer = request(server.port, "POST", "/v1/completions", raw=b"{not json")
    assert status == 400 and "JSON" in answer["error"]["message"]
    status, _, answer = request(
        server.port, "POST", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "hi"}]}
    )
    assert status == 400 and "role" in answer["error"]["message"]
    status, _, answer = request(server.port, "GET", "/v1/nothing")
    assert status == 404 and "error" in answer


# ---------------------------------------------------------------- safety


def test_host_header_allow_list(server):
    status, _, answer = request(server.port, "GET", "/v1/models", headers={"Host": "evil.example:8080"})
    assert status == 400 and answer["error"]["code"] == "invalid_host"
    assert request(server.port, "GET", "/v1/models", headers={"Host": f"localhost:{server.port}"})[0] == 200


def test_cors_allows_localhost_origins_only(server):
    _, headers, _ = request(server.port, "GET", "/v1/models", headers={"Origin": "http://localhost:3000"})
    assert headers.get("access-control-allow-origin") == "http://localhost:3000"
    _, headers, _ = request(server.port, "GET", "/v1/models", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in headers


def test_api_key(model):
    with live_server(lambda: model, api_key="s3cret") as live:
        assert live.worker.ready.wait(10)
        wrong = openai.OpenAI(base_url=f"{live.url}/v1", api_key="guess", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
        right = openai.OpenAI(base_url=f"{live.url}/v1", api_key="s3cret", max_retries=0)
        assert right.completions.create(model=MODEL_ID, prompt="Hi", max_tokens=2).choices
        assert request(live.port, "GET", "/health")[0] == 200  # health needs no key


def test_request_bodies_are_capped(model):
    with live_server(lambda: model, max_body_bytes=1024) as live:
        status, _, answer = request(live.port, "POST", "/v1/completions", {"prompt": "x" * 2000})
        assert status == 413 and answer["error"]["code"] == "request_too_large"


def test_health_is_503_while_loading(model):
    loaded = threading.Event()

    def load():
        loaded.wait(10)
        return model

    with live_server(load) as live:
        status, headers, body = request(live.port, "GET", "/health")
        assert status == 503 and body["status"] == "loading" and "retry-after" in headers
        assert request(live.port, "POST", "/v1/completions", {"prompt": "x"})[0] == 503
        loaded.set()
        assert live.worker.ready.wait(10)
        assert request(live.port, "GET", "/health")[0] == 200


# ---------------------------------------------------------------- scheduling


def test_a_client_that_disconnects_stops_its_generation(server, model, monkeypatch):
    forward = model.forward

    def slow_forward(*args, **kwargs):
        time.sleep(0.02)
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", slow_forward)
    body = json.dumps(
        {
            "model": MODEL_ID,
            "prompt": "Once upon a time",
            "max_tokens": 200,
            "stream": True,
            "temperature": 0.8,
            "seed": 1,
            "stop": ["@@@@"],
        }
    ).encode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    received = b""
    while received.count(b"data: ") < 3:
        received += sock.recv(4096)
    sock.close()
    deadline = time.monotonic() + 10
    while not any(job.finish_reason == "cancelled" for job in server.worker.finished) and time.monotonic() < deadline:
        time.sleep(0.02)
    cancelled = [job for job in server.worker.finished if job.finish_reason == "cancelled"]
    assert cancelled and cancelled[-1].n_chunks < 100
    monkeypatch.setattr(model, "forward", forward)
    status, _, answer = request(server.port, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 3})
    assert status == 200 and answer["usage"]["completion_tokens"] >= 1
    assert model.scheduler.in_use == 0  # every sequence given back


def test_a_full_queue_answers_503_with_retry_after(model):
    with live_server(lambda: model, queue_size=1, parallel=1) as live:
        assert live.worker.ready.wait(10)
        answers: list[int] = []

        def call() -> None:
            answers.append(request(live.port, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2})[0])

        # a stream of this thread holds the model's sequence: the running request waits for it, the next in the queue
        held = model.generate("Hi", stream=True, max_tokens=64)
        next(held)
        try:
            callers = [threading.Thread(target=call) for _ in range(2)]
            for caller in callers:
                caller.start()
            deadline = time.monotonic() + 10
            while live.worker.pending < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            status, headers, answer = request(live.port, "POST", "/v1/completions", {"prompt": "Hi"})
            assert status == 503 and headers["retry-after"] == "1"
            assert answer["error"]["code"] == "server_busy"
        finally:
            held.close()
        for caller in callers:
            caller.join(10)
        assert answers == [200, 200]


@pytest.mark.parametrize("share_drafts", [False, True])
def test_requests_share_the_draft_memory_only_where_the_operator_opts_in(tiny_llama4, share_drafts):
    """Without --share-drafts no request drafts from, or adds to, the model's memory of
    earlier calls; with it, each request's text is there for the next."""
    from river_cpp.decoding.draft_memory import memory_of

    body = {"prompt": "The quick brown fox", "max_tokens": 8, "temperature": 0}
    with RiverModel(tiny_llama4, n_ctx=N_CTX, n_threads=2, progress=False) as fresh:
        with live_server(lambda: fresh, share_drafts=share_drafts) as live:
            assert live.worker.ready.wait(10)
            for _ in range(3):
                assert request(live.port, "POST", "/v1/completions", body)[0] == 200
            speculative = {**body, "river": {"speculative": True}}
            assert request(live.port, "POST", "/v1/completions", speculative)[0] == 200
        # A direct call adds the last request to the memory if that request used it.
        fresh.generate("Hello", max_tokens=2)
        assert (memory_of(fresh.backbone).tokens > 0) == share_drafts


# ---------------------------------------------------------------- structured output and tools

FLAGS = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "level": {"enum": ["low", "high"]}},
    "required": ["ok", "level"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"unit": {"enum": ["c", "f"]}},
            "required": ["unit"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def tools_client(tiny_tools_llama: Path, tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        with RiverModel(tiny_tools_llama, n_ctx=512, n_threads=2, progress=False) as model:
            with live_server(lambda: model) as live:
                assert live.worker.ready.wait(10)
                yield openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=60)


def test_response_format_json_schema_through_the_openai_client(tools_client):
    response = tools_client.chat.completions.create(
        model=MODEL_ID,
        messages=[{"role": "user", "content": "Flags?"}],
        response_format={"type": "json_schema", "json_schema": {"name": "flags", "schema": FLAGS}},
        max_tokens=40,
        temperature=0,
    )
    assert response.choices[0].finish_reason == "stop"
    value = json.loads(response.choices[0].message.content)
    assert set(value) == {"ok", "level"} and isinstance(value["ok"], bool) and value["level"] in ("low", "high")
    json_mode = tools_client.chat.completions.create(
        model=MODEL_ID,
        messages=[{"role": "user", "content": "Anything"}],
        response_format={"type": "json_object"},
        max_tokens=6,
        temperature=0,
    )
    assert json_mode.choices[0].message.content.startswith("{")


def test_parse_with_a_pydantic_model_through_the_openai_client(tools_client):
    pydantic = pytest.importorskip("pydantic")
    from typing import Literal

    class Flags(pydantic.BaseModel):
        ok: bool
        level: Literal["low", "high"]

    completion = tools_client.beta.chat.completions.parse(
        model=MODEL_ID,
        messages=[{"role": "user", "content": "Flags?"}],
        response_format=Flags,
        max_tokens=40,
        temperature=0,
    )
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Flags)


def test_a_tool_call_round_trip_through_the_openai_client(tools_client):
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    first = tools_client.chat.completions.create(
        model=MODEL_ID,
        messages=messages,
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=40,
        temperature=0,
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["unit"] in ("c", "f")
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "18 degrees, sunny"},
    ]
    answer = tools_client.chat.completions.create(
        model=MODEL_ID, messages=messages, tools=[WEATHER], max_tokens=6, temperature=0
    )
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")

    streamed = tools_client.chat.completions.create(
        model=MODEL_ID,
        messages=messages[:1],
        tools=[WEATHER],
        tool_choice="required",
        max_tokens=40,
        temperature=0,
        stream=True,
    )
    deltas = [c.choices[0] for c in streamed if c.choices]
    arguments = "".join(
        d.delta.tool_calls[0].function.arguments or "" for d in deltas if d.delta and d.delta.tool_calls
    )
    names = [d.delta.tool_calls[0].function.name for d in deltas if d.delta and d.delta.tool_calls]
    assert "get_weather" in names and json.loads(arguments) == json.loads(call.function.arguments)
    assert deltas[-1].finish_reason == "tool_calls"


@pytest.mark.parametrize(
    "fields, param, words",
    [
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": {"$ref": "#"}}}},
            "response_format",
            "schema",
        ),
        ({"extra_body": {"grammar": "root ::= nowhere"}}, "grammar", "Undefined rule"),
        ({"logit_bias": {"999999": 1}}, "logit_bias", "outside"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]},
            "tools",
            "object",
        ),
    ],
)
def test_bad_structured_requests_are_400s_naming_the_field(tools_client, fields, param, words):
    with pytest.raises(openai.BadRequestError) as caught:
        tools_client.chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": "hi"}], max_tokens=4, **fields
        )
    error = caught.value.body
    assert error["param"] == param and words in error["message"]
    ok = tools_client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert ok.choices[0].message.content is not None  # the server stays usable


def test_tools_on_a_template_without_a_tool_syntax(client):
    """As llama-cpp-python: "auto" answers text; a named tool (or "required") makes the
    reply the call's JSON through the grammar."""
    messages = [{"role": "user", "content": "Weather?"}]
    auto = client.chat.completions.create(model=MODEL_ID, messages=messages, tools=[WEATHER], max_tokens=4)
    assert auto.choices[0].message.tool_calls is None and auto.choices[0].finish_reason in ("stop", "length")
    forced = client.chat.completions.create(
        model=MODEL_ID,
        messages=messages,
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=40,
    )
    call = forced.choices[0].message.tool_calls[0].function
    assert forced.choices[0].finish_reason == "tool_calls" and call.name == "get_weather"
    assert json.loads(call.arguments)["unit"] in ("c", "f")


def test_n_choices(client):
    reply = client.completions.create(model=MODEL_ID, prompt="The river", max_tokens=4, n=3, seed=1)
    assert [c.index for c in reply.choices] == [0, 1, 2]


def test_embeddings_are_llama_cpp_vectors_through_the_openai_client(client, server, tiny_llama4):
    import llama_cpp.llama

    texts = ["A river flows.", "To the sea."]
    got = client.embeddings.create(model=MODEL_ID, input=texts)
    reference = llama_cpp.llama.Llama(model_path=str(tiny_llama4), n_ctx=N_CTX, embedding=True, verbose=False)
    expected = reference.create_embedding(texts)
    reference.close()
    assert [d.index for d in got.data] == [0, 1] and got.usage.prompt_tokens == expected["usage"]["prompt_tokens"]
    for ours, theirs in zip(got.data, expected["data"]):
        # a GGUF without pooling gives a vector per token: base64 carries them one after another
        np.testing.assert_allclose(ours.embedding, np.ravel(theirs["embedding"]), rtol=1e-5, atol=1e-6)
    status, _, body = request(server.port, "POST", "/v1/embeddings", {"input": []})
    assert status == 400 and body["error"]["param"] == "input"
