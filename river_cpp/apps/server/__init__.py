"""An OpenAI-compatible HTTP server over one RiverModel (`river-cpp serve`).

- protocol: request validation and OpenAI's shapes (errors, the model list), no HTTP;
- worker: the model's thread, the bounded FIFO of jobs, cancelling;
- app: the Starlette app, SSE streaming, the safety checks, launching uvicorn;
- config: ServerConfig, how it listens and whom it serves.

What a completion is, is river_cpp.completions'. The app needs the `[server]` extra
(starlette, uvicorn); the other modules do not, so its names load on first use.
"""

from __future__ import annotations

from typing import Any

from river_cpp.apps.server.config import ServerConfig
from river_cpp.apps.server.protocol import APIError, ParsedRequest, parse_request
from river_cpp.apps.server.worker import Job, ModelWorker

_APP_NAMES = ("Server", "build", "make_server", "serve")

__all__ = ["APIError", "Job", "ModelWorker", "ParsedRequest", "ServerConfig", "parse_request", *_APP_NAMES]


def __getattr__(name: str) -> Any:
    # Imported on first use, so that a missing starlette fails only where it is needed.
    if name in _APP_NAMES:
        from river_cpp.apps.server import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
