"""An OpenAI-compatible HTTP server over one RiverModel (`river-cpp serve`).

Owns HTTP: request validation, OpenAI's error shape, SSE framing, the bounded FIFO
of requests, and the safety checks (Host allow-list, CORS, API key, body cap).
The model runs on one worker thread (the engine is not reentrant); the event loop
never waits on it. What a completion is, is river_cpp.completions'.
Needs the `[server]` extra (starlette, uvicorn).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import numbers
import queue
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from river_cpp._net import is_loopback
from river_cpp.completions import ContextOverflowError, chat_prompt
from river_cpp.policy import ExitPolicy

log = logging.getLogger("river_cpp.server")

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
# Browser origins allowed by default: pages served from this machine.
LOCAL_ORIGIN_REGEX = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"
DEFAULT_MAX_BODY_BYTES = 1 << 20
DEFAULT_QUEUE_SIZE = 8
RETRY_AFTER_SECONDS = 1
MAX_STOP_STRINGS = 4
MAX_TOP_LOGPROBS = 20


@dataclass
class ServerConfig:
    """How `river-cpp serve` listens and whom it serves.

    queue_size: requests that may wait while one runs (more get 503 + Retry-After).
    allowed_hosts: Host header names accepted besides loopback and the bind address
        ("*": any). cors_origins: browser origins allowed (None: localhost pages only).
    api_key: required as "Authorization: Bearer KEY" on every route but /health.
    insecure: allow binding a non-loopback address without an API key.
    speculative: lossless River for every request that does not set river.speculative.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    api_key: Optional[str] = None
    model_alias: Optional[str] = None
    queue_size: int = DEFAULT_QUEUE_SIZE
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    allowed_hosts: Sequence[str] = ()
    cors_origins: Optional[Sequence[str]] = None
    insecure: bool = False
    keepalive_seconds: float = 10.0
    speculative: Any = None  # a Speculative for requests whose river field does not say

    def check(self) -> None:
        """ValueError for a configuration that must not run."""
        if not is_loopback(self.host) and not self.api_key and not self.insecure:
            raise ValueError(
                f"refusing to serve on {self.host} (not loopback) without --api-key; pass --insecure to do it anyway"
            )
        if self.queue_size < 0:
            raise ValueError(f"the queue size must be >= 0, got {self.queue_size}")
        if self.max_body_bytes <= 0:
            raise ValueError(f"the body size cap must be positive, got {self.max_body_bytes}")

    def host_names(self) -> set[str]:
        names = {*LOOPBACK_HOSTS, *(h.lower().strip("[]") for h in self.allowed_hosts)}
        if self.host not in ("0.0.0.0", "::", ""):
            names.add(self.host.lower().strip("[]"))
        return names


# ---------------------------------------------------------------- errors


class APIError(Exception):
    """An error answered in OpenAI's shape: {"error": {message, type, param, code}}."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: Optional[str] = None,
        code: Optional[str] = None,
        kind: str = "invalid_request_error",
        headers: Optional[Mapping[str, str]] = None,
        extra: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})

    def body(self) -> dict[str, Any]:
        return {
            "error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code, **self.extra}
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def _busy(message: str) -> APIError:
    return APIError(
        503, message, kind="server_error", code="server_busy", headers={"Retry-After": str(RETRY_AFTER_SECONDS)}
    )


# ---------------------------------------------------------------- validation


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object (NaN and Infinity are not JSON)."""
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as error:
        raise APIError(400, f"the request body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    return body


def _number(
    body: Mapping[str, Any], name: str, default: Optional[float], low: float, high: float, *, low_open: bool = False
) -> Optional[float]:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise APIError(400, f"{name} must be a finite number, got {value!r}", param=name)
    if value < low or value > high or (low_open and value == low):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise APIError(400, f"{name} must be in {interval}, got {value!r}", param=name)
    return float(value)


def _integer(body: Mapping[str, Any], name: str, default: Optional[int], low: int, high: int) -> Optional[int]:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise APIError(400, f"{name} must be an integer, got {value!r}", param=name)
    if not low <= value <= high:
        raise APIError(400, f"{name} must be an integer in [{low}, {high}], got {value!r}", param=name)
    return value


def _boolean(body: Mapping[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise APIError(400, f"{name} must be a boolean, got {value!r}", param=name)
    return value


def _stop(body: Mapping[str, Any]) -> Optional[list[str]]:
    stop = body.get("stop")
    if stop is None:
        return None
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or len(stops) > MAX_STOP_STRINGS or not all(isinstance(s, str) and s for s in stops):
        raise APIError(
            400, f"stop must be a non-empty string or a list of at most {MAX_STOP_STRINGS} of them", param="stop"
        )
    return stops


def _river_options(body: Mapping[str, Any], n_layer: int, default_speculative: Any = None) -> dict[str, Any]:
    """The `river` extension field as completions options (policy, speculative)."""
    river = body.get("river")
    if river is None:
        return {"speculative": default_speculative} if default_speculative is not None else {}
    if not isinstance(river, dict):
        raise APIError(400, "river must be an object", param="river")
    unknown = set(river) - {"tau", "min_layer", "exit_layer", "policy", "speculative"}
    if unknown:
        raise APIError(400, f"unknown river options: {', '.join(sorted(unknown))}", param="river")
    chosen = [k for k in ("tau", "exit_layer", "policy") if river.get(k) is not None]
    if len(chosen) > 1:
        raise APIError(400, "river takes one of tau, exit_layer and policy", param="river")
    policy: Optional[ExitPolicy] = None
    if river.get("tau") is not None:
        tau = _number(river, "tau", None, -1.0, 1.0)
        min_layer = _integer(river, "min_layer", 2, 0, n_layer)
        policy = ExitPolicy.uniform(tau, min_layer=min_layer)
    elif river.get("exit_layer") is not None:
        policy = ExitPolicy.at_layer(_integer(river, "exit_layer", None, 0, n_layer))
    elif river.get("policy") is not None:
        if not isinstance(river["policy"], dict):
            raise APIError(400, "river.policy must be a policy object (as `river-cpp calibrate` writes)", param="river")
        try:
            policy = ExitPolicy.from_json(json.dumps(river["policy"]))
        except ValueError as error:
            raise APIError(400, f"river.policy: {error}", param="river") from None
    options: dict[str, Any] = {"policy": policy}
    speculative = river.get("speculative")
    if speculative is None and default_speculative is not None:
        options["speculative"] = default_speculative
    if speculative is not None:
        if not isinstance(speculative, bool):
            raise APIError(400, "river.speculative must be a boolean", param="river")
        if speculative:
            from river_cpp.speculative import Speculative

            # With an exit policy too, River's own exits draft.
            options["speculative"] = Speculative(draft=policy) if policy is not None else Speculative()
            options["policy"] = None
    return options


def _unsupported(body: Mapping[str, Any]) -> None:
    if _integer(body, "n", 1, 1, 1) != 1 or _integer(body, "best_of", 1, 1, 1) != 1:
        raise APIError(400, "only one choice per request (n = 1)", param="n")
    for name in ("presence_penalty", "frequency_penalty"):
        if _number(body, name, 0.0, -2.0, 2.0) != 0.0:
            raise APIError(400, f"{name} is not supported (use repeat_penalty)", param=name)
    if body.get("echo"):
        raise APIError(400, "echo is not supported", param="echo")
    if body.get("suffix"):
        raise APIError(400, "suffix is not supported", param="suffix")
    if body.get("tools") or body.get("functions"):
        raise APIError(400, "tools are not supported", param="tools")
    response_format = body.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        raise APIError(400, 'only response_format {"type": "text"} is supported', param="response_format")


def _sampling(body: Mapping[str, Any], *, chat: bool) -> dict[str, Any]:
    """Sampling options shared by both endpoints (llama-server's defaults)."""
    max_tokens = _integer(
        body,
        "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens",
        None if chat else 16,
        1,
        1 << 30,
    )
    seed = _integer(body, "seed", None, -(1 << 63), (1 << 64) - 1)
    options = {
        "max_tokens": max_tokens,
        "temperature": _number(body, "temperature", 0.8, 0.0, 2.0),
        "top_p": _number(body, "top_p", 0.95, 0.0, 1.0),
        "top_k": _integer(body, "top_k", 40, 0, 1 << 30),
        "min_p": _number(body, "min_p", 0.05, 0.0, 1.0),
        "repeat_penalty": _number(body, "repeat_penalty", 1.0, 0.0, 10.0, low_open=True),
        "seed": None if seed is None else seed % (1 << 64),
        "stop": _stop(body),
    }
    stream = _boolean(body, "stream", False)
    stream_options = body.get("stream_options")
    if stream_options is not None:
        if not isinstance(stream_options, dict):
            raise APIError(400, "stream_options must be an object", param="stream_options")
        _boolean(stream_options, "include_usage", False)
        if not stream:
            raise APIError(400, "stream_options needs stream: true", param="stream_options")
    options["stream"] = stream
    options["stream_options"] = stream_options
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise APIError(400, "user must be a string", param="user")
    return options


def _completion_prompt(body: Mapping[str, Any]) -> Union[str, list[int]]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return prompt
    raise APIError(400, "prompt must be a string, or a list of token ids (one prompt per request)", param="prompt")


@dataclass
class ParsedRequest:
    """A validated request: what to call on the model, and how to answer."""

    chat: bool
    prompt: Union[str, list[int], list[dict[str, Any]]]
    options: dict[str, Any]

    @property
    def stream(self) -> bool:
        return self.options["stream"]


def parse_request(
    body: Mapping[str, Any], *, chat: bool, model_id: str, n_layer: int, default_speculative: Any = None
) -> ParsedRequest:
    """Check every field of a completions or chat completions body; APIError otherwise."""
    name = body.get("model")
    if name is not None and not isinstance(name, str):
        raise APIError(400, "model must be a string", param="model")
    if name is not None and name != model_id:
        # A request names a model; it never names a file to load.
        raise APIError(
            404,
            f"the model {name!r} does not exist: this server serves {model_id!r}",
            param="model",
            code="model_not_found",
        )
    _unsupported(body)
    options = _sampling(body, chat=chat)
    options.update(_river_options(body, n_layer, default_speculative))
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise APIError(400, "messages must be a non-empty list", param="messages")
        options["logprobs"] = _boolean(body, "logprobs", False)
        options["top_logprobs"] = _integer(body, "top_logprobs", None, 0, MAX_TOP_LOGPROBS)
        if options["top_logprobs"] is not None and not options["logprobs"]:
            raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
        return ParsedRequest(True, messages, options)
    options["logprobs"] = _integer(body, "logprobs", None, 0, MAX_TOP_LOGPROBS)
    return ParsedRequest(False, _completion_prompt(body), options)


# ---------------------------------------------------------------- the worker


class Job:
    """One request's generation: runs on the worker thread, reports to the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, request: ParsedRequest, model_id: str) -> None:
        self.loop = loop
        self.request = request
        self.model_id = model_id
        self.events: asyncio.Queue = asyncio.Queue()
        self.cancel = threading.Event()
        self.finish_reason: Optional[str] = None
        self.n_chunks = 0

    def _post(self, *event: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:  # the loop is closed: nobody is listening
            self.cancel.set()

    def run(self, model) -> None:
        """Generate (on the worker thread), posting ("chunk" | "result" | "error", ...), then ("done",)."""
        try:
            if self.cancel.is_set():
                self.finish_reason = "cancelled"
                return
            request = self.request
            call = model.create_chat_completion if request.chat else model.create_completion
            out = call(request.prompt, **request.options, cancel=self.cancel, model_name=self.model_id)
            if isinstance(out, dict):
                self.finish_reason = out["choices"][0]["finish_reason"]
                self._post("result", out)
                return
            try:
                for chunk in out:
                    self.n_chunks += 1
                    for choice in chunk["choices"]:
                        self.finish_reason = choice["finish_reason"] or self.finish_reason
                    self._post("chunk", chunk)
                    if self.cancel.is_set():
                        self.finish_reason = "cancelled"
                        break
            finally:
                out.close()
        except ContextOverflowError as error:
            self._post("error", _overflow(error))
        except (ValueError, TypeError) as error:
            self._post("error", APIError(400, str(error)))
        except Exception as error:  # noqa: BLE001 - a failed generation must not kill the worker
            log.exception("generation failed")
            self._post("error", APIError(500, f"generation failed: {error}", kind="server_error"))
        finally:
            self._post("done")


def _overflow(error: ContextOverflowError) -> APIError:
    return APIError(
        400,
        str(error),
        param="messages",
        code="context_length_exceeded",
        extra={"prompt_tokens": error.prompt_tokens, "n_ctx": error.n_ctx},
    )


class ModelWorker:
    """The one thread that loads and runs the model; jobs wait in a bounded FIFO."""

    def __init__(self, load: Callable[[], Any], *, queue_size: int = DEFAULT_QUEUE_SIZE) -> None:
        self._load = load
        self.capacity = queue_size + 1  # the running job and those waiting
        self._jobs: queue.Queue[Optional[Job]] = queue.Queue()
        self._pending = 0
        self._count_lock = threading.Lock()
        self.model: Any = None
        self.load_error: Optional[BaseException] = None
        self.ready = threading.Event()
        self.finished: deque[Job] = deque(maxlen=32)  # the latest jobs, for tests and logs
        self._thread = threading.Thread(target=self._main, name="river-cpp-model", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._jobs.put(None)

    @property
    def pending(self) -> int:
        with self._count_lock:
            return self._pending

    def submit(self, job: Job) -> bool:
        """Queue `job`; False when the queue is full."""
        with self._count_lock:
            if self._pending >= self.capacity:
                return False
            self._pending += 1
        self._jobs.put(job)
        return True

    def _main(self) -> None:
        try:
            self.model = self._load()
        except BaseException as error:  # noqa: BLE001 - reported by /health
            log.exception("loading the model failed")
            self.load_error = error
            return
        self.ready.set()
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                job.run(self.model)
            finally:
                self.finished.append(job)
                with self._count_lock:
                    self._pending -= 1


# ---------------------------------------------------------------- HTTP


def _sse(data: Any) -> bytes:
    """One server-sent event carrying `data` as JSON (or the literal [DONE])."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"data: {text}\n\n".encode()


async def _watch_disconnect(receive: Callable, job: Job) -> None:
    """Cancel `job` when the client goes away (the body has been read already)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            job.cancel.set()
            return


class _EventStream:
    """An ASGI response streaming a job's chunks as SSE; a disconnect cancels the job.
    Comments keep the connection alive while the request waits or its prompt runs."""

    def __init__(self, job: Job, keepalive_seconds: float, headers: Mapping[str, str]) -> None:
        self.job = job
        self.keepalive = keepalive_seconds
        self.headers = headers

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.headers.items()]
        watcher = asyncio.ensure_future(_watch_disconnect(receive, self.job))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            while True:
                try:
                    event = await asyncio.wait_for(self.job.events.get(), self.keepalive)
                except asyncio.TimeoutError:
                    await send({"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True})
                    continue
                if event[0] == "chunk":
                    body = _sse(event[1])
                elif event[0] == "error":
                    body = _sse(event[1].body())
                else:
                    await send({"type": "http.response.body", "body": _sse("[DONE]"), "more_body": False})
                    return
                await send({"type": "http.response.body", "body": body, "more_body": True})
        except OSError:  # the client went away while we wrote
            pass
        finally:
            self.job.cancel.set()
            watcher.cancel()


class _Guard:
    """Host allow-list (DNS rebinding), API key and body size cap, before any route."""

    def __init__(self, app: Callable, config: ServerConfig) -> None:
        self.app = app
        self.config = config
        self.hosts = config.host_names()

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        error = self._check(scope, headers)
        if error is not None:
            await error.response()(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _check(self, scope: dict, headers: Mapping[str, str]) -> Optional[APIError]:
        host = _host_name(headers.get("host", ""))
        if "*" not in self.hosts and host not in self.hosts:
            return APIError(
                400,
                f"the Host header {headers.get('host', '')!r} is not allowed (add it with --allowed-host)",
                code="invalid_host",
            )
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.config.max_body_bytes):
            return APIError(
                413, f"the request body is larger than {self.config.max_body_bytes} bytes", code="request_too_large"
            )
        key = self.config.api_key
        if key and scope["path"] != "/health" and scope["method"] != "OPTIONS":
            given = headers.get("authorization", "")
            token = given[7:] if given[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(token.encode("utf-8"), key.encode("utf-8")):
                return APIError(401, "invalid or missing API key (Authorization: Bearer KEY)", code="invalid_api_key")
        return None


def _host_name(host: str) -> str:
    """The name of a Host header, without its port."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class Server:
    """The Starlette app over a ModelWorker."""

    def __init__(self, worker: ModelWorker, config: ServerConfig, model_id: str) -> None:
        self.worker = worker
        self.config = config
        self.model_id = model_id
        self.created = int(time.time())

    def app(self) -> Callable:
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
        ]
        if self.config.cors_origins is None:
            cors = {"allow_origin_regex": LOCAL_ORIGIN_REGEX}
        else:
            cors = {"allow_origins": list(self.config.cors_origins)}
        app = Starlette(
            routes=routes,
            exception_handlers={HTTPException: _http_error},
            middleware=[
                Middleware(
                    CORSMiddleware,
                    allow_methods=["GET", "POST", "OPTIONS"],
                    allow_headers=["Authorization", "Content-Type"],
                    **cors,
                ),
                Middleware(_Guard, config=self.config),
            ],
        )
        return app

    async def health(self, request: Request) -> Response:
        if self.worker.load_error is not None:
            return JSONResponse({"status": "error", "error": str(self.worker.load_error)}, status_code=500)
        if not self.worker.ready.is_set():
            return JSONResponse({"status": "loading"}, status_code=503, headers={"Retry-After": "1"})
        return JSONResponse({"status": "ok", "queued": self.worker.pending})

    async def models(self, request: Request) -> Response:
        entry: dict[str, Any] = {
            "id": self.model_id,
            "object": "model",
            "created": self.created,
            "owned_by": "river-cpp",
        }
        model = self.worker.model
        if self.worker.ready.is_set():
            entry["river"] = {"n_layer": model.n_layer, "n_ctx": model.n_ctx, "has_river": model.has_river}
        return JSONResponse({"object": "list", "data": [entry]})

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self._generate(request, chat=True)

    async def _generate(self, request: Request, *, chat: bool) -> Response:
        try:
            body = parse_json(await self._body(request))
            if self.worker.load_error is not None:
                raise APIError(500, "the model failed to load", kind="server_error")
            if not self.worker.ready.is_set():
                raise _busy("the model is loading")
            model = self.worker.model
            parsed = parse_request(
                body,
                chat=chat,
                model_id=self.model_id,
                n_layer=model.n_layer,
                default_speculative=self.config.speculative,
            )
            await self._check_context(model, parsed)
            job = Job(asyncio.get_running_loop(), parsed, self.model_id)
            if not self.worker.submit(job):
                raise _busy(f"the server is busy ({self.worker.capacity} requests running or queued); retry later")
        except APIError as error:
            return error.response()
        if parsed.stream:
            return _EventStream(job, self.config.keepalive_seconds, {})  # type: ignore[return-value]
        watcher = asyncio.ensure_future(_watch_disconnect(request.receive, job))
        try:
            while True:
                event = await job.events.get()
                if event[0] == "result":
                    return JSONResponse(event[1])
                if event[0] == "error":
                    return event[1].response()
                if event[0] == "done":
                    return APIError(499, "the request was cancelled", kind="server_error").response()
        finally:
            job.cancel.set()
            watcher.cancel()

    async def _body(self, request: Request) -> bytes:
        """The body, read up to the cap (a missing or lying Content-Length changes nothing)."""
        parts, size = [], 0
        async for part in request.stream():
            size += len(part)
            if size > self.config.max_body_bytes:
                raise APIError(
                    413, f"the request body is larger than {self.config.max_body_bytes} bytes", code="request_too_large"
                )
            parts.append(part)
        return b"".join(parts)

    async def _check_context(self, model, parsed: ParsedRequest) -> None:
        """400 with the token counts when the prompt leaves no room in the context.
        Tokenizing reads the vocabulary only, so it runs beside a generation."""

        def count() -> int:
            if parsed.chat:
                try:
                    text = chat_prompt(model, parsed.prompt)  # type: ignore[arg-type]
                except ValueError as error:
                    raise APIError(400, str(error), param="messages") from None
                return len(model.tokenize(text, add_bos=True, special=True))
            if isinstance(parsed.prompt, str):
                return len(model.tokenize(parsed.prompt, add_bos=True, special=True))
            if any(not 0 <= t < model.n_vocab for t in parsed.prompt):
                raise APIError(400, f"prompt token ids must be in [0, {model.n_vocab})", param="prompt")
            return len(parsed.prompt)

        n_prompt = await asyncio.get_running_loop().run_in_executor(None, count)
        if n_prompt >= model.n_ctx:
            error = _overflow(ContextOverflowError(n_prompt, model.n_ctx))
            error.param = "messages" if parsed.chat else "prompt"
            raise error


async def _http_error(request: Request, error: HTTPException) -> Response:
    kind = "not_found_error" if error.status_code == 404 else "invalid_request_error"
    return APIError(error.status_code, str(error.detail), kind=kind).response()


# ---------------------------------------------------------------- running


def build(load: Callable[[], Any], config: ServerConfig, model_id: str) -> tuple[Callable, ModelWorker]:
    """The ASGI app and its (started) worker, which loads the model in the background."""
    config.check()
    worker = ModelWorker(load, queue_size=config.queue_size)
    worker.start()
    return Server(worker, config, model_id).app(), worker


def make_server(app: Callable, config: ServerConfig, *, log_level: str = "info"):
    """A uvicorn.Server for `app` (h11, no websockets, no proxy headers trusted)."""
    import uvicorn

    return uvicorn.Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            http="h11",
            ws="none",
            lifespan="off",
            loop="asyncio",
            proxy_headers=False,
            server_header=False,
            log_level=log_level,
            timeout_graceful_shutdown=5,
        )
    )


def serve(load: Callable[[], Any], config: ServerConfig, model_id: str, *, log_level: str = "info") -> None:
    """Serve until interrupted: /health answers 503 while `load()` runs on the worker."""
    app, worker = build(load, config, model_id)
    print(
        f"river-cpp serve: http://{config.host}:{config.port}/v1, model {model_id!r}"
        f"{'' if config.api_key else ', no API key'}; /health answers 503 until it is loaded",
        file=sys.stderr,
        flush=True,
    )
    try:
        make_server(app, config, log_level=log_level).run()
    finally:
        worker.stop()
