"""The HTTP side of `river-cpp serve`: the Starlette app, SSE streaming, the safety
checks (Host allow-list, CORS, API key, body cap) and launching uvicorn.

What a request may say is river_cpp.apps.server.protocol's; running it is the worker's
(river_cpp.apps.server.worker). Needs the `[server]` extra (starlette, uvicorn).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import hmac
import json
import sys
import time
from typing import Any, Callable, Mapping, Optional

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from river_cpp.apps.embeddings import Embedder
from river_cpp.apps.server.config import ServerConfig
from river_cpp.apps.server.protocol import (
    APIError,
    busy,
    check_prompt_fits,
    check_structured,
    model_list,
    parse_json,
    parse_request,
    too_large,
)
from river_cpp.apps.server.worker import Job, ModelWorker
from river_cpp.decoding.decision import Decoding

# Browser origins allowed by default: pages served from this machine.
# The most strings one /v1/embeddings request may embed.
MAX_EMBEDDING_INPUTS = 256
LOCAL_ORIGIN_REGEX = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"


def error_response(error: APIError) -> JSONResponse:
    """`error` as an HTTP response in OpenAI's shape."""
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


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

    def __init__(self, job: Job, keepalive_seconds: float) -> None:
        self.job = job
        self.keepalive = keepalive_seconds

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
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
            await error_response(error)(scope, receive, send)
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
            return too_large(self.config.max_body_bytes)
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
    """The Starlette app over a ModelWorker, serving one model as `model_id`."""

    def __init__(self, worker: ModelWorker, config: ServerConfig, model_id: str) -> None:
        self.worker = worker
        self.config = config
        self.model_id = model_id
        self.created = int(time.time())
        # llama.cpp's embedding context of the served file, opened by the first
        # /v1/embeddings request (river_cpp.apps.embeddings).
        self._embedder: Optional[Embedder] = None

    def app(self) -> Callable:
        """The ASGI app: routes behind the guard and CORS."""
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/embeddings", self.embeddings, methods=["POST"]),
        ]
        if self.config.cors_origins is None:
            cors = {"allow_origin_regex": LOCAL_ORIGIN_REGEX}
        else:
            cors = {"allow_origins": list(self.config.cors_origins)}
        return Starlette(
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

    async def health(self, request: Request) -> Response:
        """GET /health: 200 once loaded (with the slots idle and processing, as llama-server
        reports them, and `queued`: requests running or waiting), 503 while loading, 500
        when loading failed."""
        if self.worker.load_error is not None:
            return JSONResponse({"status": "error", "error": str(self.worker.load_error)}, status_code=500)
        if not self.worker.ready.is_set():
            return JSONResponse({"status": "loading"}, status_code=503, headers={"Retry-After": "1"})
        slots, pending = self.worker.slots, self.worker.pending
        processing = min(slots, pending)
        return JSONResponse(
            {"status": "ok", "queued": pending, "slots_idle": slots - processing, "slots_processing": processing}
        )

    async def models(self, request: Request) -> Response:
        """GET /v1/models: the one model, with its shape once it is loaded."""
        details = None
        if self.worker.ready.is_set():
            model = self.worker.model
            details = {"n_layer": model.n_layer, "n_ctx": model.n_ctx, "has_river": model.has_river}
        return JSONResponse(model_list(self.model_id, self.created, details))

    async def completions(self, request: Request) -> Response:
        """POST /v1/completions."""
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        """POST /v1/chat/completions."""
        return await self._generate(request, chat=True)

    async def embeddings(self, request: Request) -> Response:
        """POST /v1/embeddings: OpenAI's embeddings of `input` (a string or a list of
        strings), pooled as the GGUF says, by llama.cpp's own context on the served
        file; it runs beside generations (its own context, its own lock)."""
        try:
            body = parse_json(await self._body(request))
            if self.worker.load_error is not None:
                raise APIError(500, "the model failed to load", kind="server_error")
            if not self.worker.ready.is_set():
                raise busy("the model is loading")
            texts = body.get("input")
            if isinstance(texts, str):
                texts = [texts]
            if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
                raise APIError(400, "input must be a string or a non-empty list of strings", param="input")
            if len(texts) > MAX_EMBEDDING_INPUTS:
                raise APIError(400, f"input may hold at most {MAX_EMBEDDING_INPUTS} strings", param="input")
            encoding = body.get("encoding_format", "float")
            if encoding not in ("float", "base64"):
                raise APIError(400, 'encoding_format must be "float" or "base64"', param="encoding_format")
            if self._embedder is None:
                model = self.worker.model
                self._embedder = Embedder(model.model_path, n_ctx=model.n_ctx, n_threads=model.n_threads)
            answer = await asyncio.get_running_loop().run_in_executor(
                None, lambda: self._embedder.create_embedding(texts, model=self.model_id)
            )
        except APIError as error:
            return error_response(error)
        except (ValueError, RuntimeError) as error:
            return error_response(APIError(400, str(error), param="input"))
        if encoding == "base64":  # OpenAI's: the float32 little-endian bytes (the openai client asks for it)
            for item in answer["data"]:
                raw = np.asarray(item["embedding"], dtype="<f4").tobytes()
                item["embedding"] = base64.b64encode(raw).decode("ascii")
        return JSONResponse(answer)

    def _cache_scope(self, request: Request) -> str:
        """The prompt cache scope of a request: "" (shared) with --share-prompt-cache, else a
        hash of the API key it presented (the key itself is never kept)."""
        if self.config.share_prompt_cache:
            return ""
        given = request.headers.get("authorization", "")
        token = given[7:] if given[:7].lower() == "bearer " else ""
        return hashlib.sha256(token.encode("utf-8")).hexdigest()[:32] if token else ""

    async def _generate(self, request: Request, *, chat: bool) -> Response:
        try:
            body = parse_json(await self._body(request))
            if self.worker.load_error is not None:
                raise APIError(500, "the model failed to load", kind="server_error")
            if not self.worker.ready.is_set():
                raise busy("the model is loading")
            model = self.worker.model
            parsed = parse_request(
                body, chat=chat, n_layer=model.n_layer, has_river=model.has_river, defaults=model.decoding()
            )
            if not self.config.share_drafts:
                parsed.options["decoding"] = _private_drafts(parsed.options["decoding"])
            # Tokenizing reads the vocabulary only, so it runs beside a generation.
            await asyncio.get_running_loop().run_in_executor(None, check_structured, model, parsed)
            await asyncio.get_running_loop().run_in_executor(None, check_prompt_fits, model, parsed)
            job = Job(asyncio.get_running_loop(), parsed, self.model_id, scope=self._cache_scope(request))
            if not self.worker.submit(job):
                raise busy(f"the server is busy ({self.worker.capacity} requests running or queued); retry later")
        except APIError as error:
            return error_response(error)
        if parsed.stream:
            return _EventStream(job, self.config.keepalive_seconds)  # type: ignore[return-value]
        watcher = asyncio.ensure_future(_watch_disconnect(request.receive, job))
        try:
            while True:
                event = await job.events.get()
                if event[0] == "result":
                    return JSONResponse(event[1])
                if event[0] == "error":
                    return error_response(event[1])
                if event[0] == "done":
                    return error_response(APIError(499, "the request was cancelled", kind="server_error"))
        finally:
            job.cancel.set()
            watcher.cancel()

    async def _body(self, request: Request) -> bytes:
        """The body, read up to the cap (a missing or lying Content-Length changes nothing)."""
        parts, size = [], 0
        async for part in request.stream():
            size += len(part)
            if size > self.config.max_body_bytes:
                raise too_large(self.config.max_body_bytes)
            parts.append(part)
        return b"".join(parts)


def _private_drafts(decoding: Decoding) -> Decoding:
    """`decoding` with a draft that leaves the model's memory of earlier requests alone
    (neither drafting from it nor adding to it): without --share-drafts one client's
    text must not shape another's drafts, and so its timing."""
    spec = decoding.speculative
    if spec is None or not spec.memory:
        return decoding
    return dataclasses.replace(decoding, speculative=dataclasses.replace(spec, memory=False))


async def _http_error(request: Request, error: HTTPException) -> Response:
    kind = "not_found_error" if error.status_code == 404 else "invalid_request_error"
    return error_response(APIError(error.status_code, str(error.detail), kind=kind))


# ---------------------------------------------------------------- running


def build(load: Callable[[], Any], config: ServerConfig, model_id: str) -> tuple[Callable, ModelWorker]:
    """The ASGI app and its (started) worker, which loads the model in the background."""
    config.check()
    worker = ModelWorker(load, queue_size=config.queue_size, parallel=config.parallel)
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
