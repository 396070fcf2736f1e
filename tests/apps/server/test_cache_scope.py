"""The server's prompt cache isolation: each job runs in its client's cache scope (a hash
of the API key it presented, or one shared scope with --share-prompt-cache); the model
forgets a sequence another scope filled (tests/test_model_prompt_cache.py)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from river_cpp.apps.server.protocol import ParsedRequest
from river_cpp.apps.server.worker import Job, ModelWorker
from river_cpp.engine.compute import prompt_cache

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("stand_in_completions")]

WAIT = 10


class ScopeModel:
    """Records the cache scope each completion ran in."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.done = threading.Semaphore(0)

    def create_completion(self, prompt, **options):
        self.events.append(prompt_cache._scope.get())
        self.done.release()
        return {"choices": [{"text": "x", "finish_reason": "stop"}]}


def test_jobs_run_in_their_scope():
    model = ScopeModel()
    worker = ModelWorker(lambda: model)
    worker.start()
    loop = asyncio.new_event_loop()
    try:
        assert worker.ready.wait(WAIT)
        for scope in ("", "key-a", "key-a", "key-b", ""):
            assert worker.submit(Job(loop, ParsedRequest(False, "hi", {}), "served", scope=scope))
            assert model.done.acquire(timeout=WAIT)
    finally:
        worker.stop()
        worker.join(WAIT)
        loop.close()
    assert model.events == ["", "key-a", "key-a", "key-b", ""]


def test_the_scope_of_a_request():
    from river_cpp.apps.server.app import Server
    from river_cpp.apps.server.config import ServerConfig

    class _Request:
        def __init__(self, authorization: str) -> None:
            self.headers = {"authorization": authorization} if authorization else {}

    private = Server.__new__(Server)
    private.config = ServerConfig(api_key="secret")
    shared = Server.__new__(Server)
    shared.config = ServerConfig(api_key="secret", share_prompt_cache=True)
    a = private._cache_scope(_Request("Bearer secret"))
    assert a and "secret" not in a and a == private._cache_scope(_Request("bearer secret"))
    assert private._cache_scope(_Request("Bearer other")) != a
    assert private._cache_scope(_Request("")) == ""
    assert shared._cache_scope(_Request("Bearer secret")) == ""
