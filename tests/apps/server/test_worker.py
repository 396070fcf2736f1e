"""river_cpp.apps.server.worker: jobs on the model's thread, with a stand-in model (no
engine, no HTTP): events, errors, cancelling, the bounded queue, a failed load."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from river_cpp.apps.server.protocol import ParsedRequest
from river_cpp.apps.server.worker import Job, ModelWorker
from river_cpp.completions import CANCELLED
from river_cpp.engine.compute.context import ContextOverflowError

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("stand_in_completions")]

WAIT = 10  # seconds before a test gives up on the worker thread


class ScriptedModel:
    """Answers create_completion with `n_chunks` chunks (or one dict), or raises `error`;
    each chunk waits on `gate`, so a test can hold a generation mid-way."""

    def __init__(self, n_chunks: int = 3, error: Exception | None = None) -> None:
        self.n_chunks = n_chunks
        self.error = error
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()  # set once a chunk waits on the gate
        self.calls: list[dict[str, Any]] = []
        self.closed = False

    def create_completion(self, prompt, *, stream: bool, **options):
        self.calls.append({"prompt": prompt, "stream": stream, **options})
        if self.error is not None:
            raise self.error
        if not stream:
            return {"choices": [{"text": "whole", "finish_reason": "length"}]}
        return self._chunks()

    def _chunks(self):
        try:
            for i in range(self.n_chunks):
                self.waiting.set()
                self.gate.wait(WAIT)
                last = i == self.n_chunks - 1
                yield {"choices": [{"text": str(i), "finish_reason": "stop" if last else None}]}
        finally:
            self.closed = True

    create_chat_completion = create_completion


def request(*, stream: bool, chat: bool = False) -> ParsedRequest:
    return ParsedRequest(chat, "hi", {"stream": stream, "max_tokens": 4})


def run_job(model, parsed: ParsedRequest, *, cancel_before: bool = False) -> tuple[Job, list[tuple]]:
    """Run one job on this thread's own event loop; its job and every event it posted."""
    loop = asyncio.new_event_loop()
    try:
        job = Job(loop, parsed, "served")
        if cancel_before:
            job.cancel.set()
        job.run(model)

        async def drain() -> list[tuple]:
            events = []
            while not events or events[-1][0] != "done":
                events.append(await asyncio.wait_for(job.events.get(), WAIT))
            return events

        return job, loop.run_until_complete(drain())
    finally:
        loop.close()


def test_a_whole_answer_is_one_result():
    model = ScriptedModel()
    job, events = run_job(model, request(stream=False))
    assert [e[0] for e in events] == ["result", "done"]
    assert events[0][1]["choices"][0]["text"] == "whole" and job.finish_reason == "length"
    call = model.calls[0]
    assert call["model_name"] == "served" and call["cancel"] is job.cancel and call["max_tokens"] == 4


def test_a_stream_posts_each_chunk_then_done():
    model = ScriptedModel(n_chunks=3)
    job, events = run_job(model, request(stream=True, chat=True))
    assert [e[0] for e in events] == ["chunk"] * 3 + ["done"]
    assert [e[1]["choices"][0]["text"] for e in events[:-1]] == ["0", "1", "2"]
    assert job.n_chunks == 3 and job.finish_reason == "stop" and model.closed


def test_a_job_cancelled_before_it_runs_does_not_generate():
    model = ScriptedModel()
    job, events = run_job(model, request(stream=True), cancel_before=True)
    assert events == [("done",)] and job.finish_reason == CANCELLED and not model.calls


@pytest.mark.parametrize(
    "error, status, code",
    [
        (ContextOverflowError(300, 256), 400, "context_length_exceeded"),
        (ValueError("bad stop"), 400, None),
        (RuntimeError("the engine broke"), 500, None),
    ],
)
def test_errors_become_api_errors(error, status, code):
    _, events = run_job(ScriptedModel(error=error), request(stream=False, chat=True))
    assert [e[0] for e in events] == ["error", "done"]
    api_error = events[0][1]
    assert api_error.status == status and api_error.code == code and str(error) in api_error.message


def start_worker(model, **options) -> ModelWorker:
    worker = ModelWorker(lambda: model, **options)
    worker.start()
    assert worker.ready.wait(WAIT)
    return worker


def test_cancelling_a_running_stream_stops_it_and_the_worker_goes_on():
    model = ScriptedModel(n_chunks=50)
    model.gate.clear()
    loop = asyncio.new_event_loop()
    worker = start_worker(model)
    try:
        job = Job(loop, request(stream=True), "served")
        assert worker.submit(job)
        assert model.waiting.wait(WAIT)  # the generation has begun
        job.cancel.set()
        model.gate.set()
        after = Job(loop, request(stream=False), "served")
        assert worker.submit(after)
        worker.stop()
        worker.join(WAIT)
        assert list(worker.finished) == [job, after]
        assert job.finish_reason == CANCELLED and job.n_chunks == 1 and model.closed
        assert after.finish_reason == "length" and worker.pending == 0
    finally:
        loop.close()


def test_the_queue_is_bounded():
    model = ScriptedModel(n_chunks=1)
    model.gate.clear()  # the first job holds the thread
    loop = asyncio.new_event_loop()
    worker = start_worker(model, queue_size=1)
    try:
        jobs = [Job(loop, request(stream=True), "served") for _ in range(3)]
        assert worker.submit(jobs[0]) and worker.submit(jobs[1])
        assert worker.pending == worker.capacity == 2
        assert not worker.submit(jobs[2])  # one runs, one waits: full
        model.gate.set()
        worker.stop()
        worker.join(WAIT)
        assert list(worker.finished) == jobs[:2] and worker.pending == 0
    finally:
        loop.close()


def test_a_failed_load_is_kept_for_health():
    def load():
        raise FileNotFoundError("no such model")

    worker = ModelWorker(load)
    worker.start()
    worker.join(WAIT)
    assert isinstance(worker.load_error, FileNotFoundError) and not worker.ready.is_set()
