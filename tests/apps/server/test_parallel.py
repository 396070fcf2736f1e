"""`river-cpp serve --parallel N`: the setting's checks, a worker that runs N jobs at
once, and a soak of a few hundred mixed requests through the app on the demo model
(streamed, whole, disconnected, over the context): every request ends, nothing
stalls, and the process's memory stays flat."""

from __future__ import annotations

import asyncio
import ctypes
import itertools
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_app import live_server
from test_app import request as http_request
from test_worker import WAIT, ScriptedModel, request, start_worker

from river_cpp import RiverModel
from river_cpp.apps.server.config import ServerConfig
from river_cpp.apps.server.worker import Job
from river_cpp.completions import CANCELLED

pytestmark = pytest.mark.server

# ---------------------------------------------------------------- the setting


@pytest.mark.parametrize("parallel", [0, -1, True, 2.5, "2"])
def test_parallel_must_be_a_positive_integer(parallel):
    with pytest.raises(ValueError, match="--parallel must be a positive integer"):
        ServerConfig(parallel=parallel).check()


@pytest.mark.parametrize("parallel", ["0", "-3"])
def test_serve_refuses_a_bad_parallel_before_loading(parallel, capsys):
    from river_cpp.apps.cli import main

    assert main(["serve", "--model", "/no/such/model.gguf", "--parallel", parallel]) == 1
    assert "--parallel must be a positive integer" in capsys.readouterr().err


# ---------------------------------------------------------------- the worker


class MeetingModel:
    """A stand-in model whose streams all wait, at their first chunk, until `n` of
    them are running at once (a barrier): a worker that runs fewer at once breaks it."""

    def __init__(self, n: int) -> None:
        self.n_seq_max = n
        self.barrier = threading.Barrier(n, timeout=WAIT)

    def create_completion(self, prompt, *, stream: bool, **options):
        return self._chunks()

    def _chunks(self):
        self.barrier.wait()
        yield {"choices": [{"text": "met", "finish_reason": "stop"}]}

    create_chat_completion = create_completion


@pytest.mark.usefixtures("stand_in_completions")
def test_a_worker_with_parallel_2_runs_two_jobs_at_once(capfd):
    model = MeetingModel(2)
    loop = asyncio.new_event_loop()
    worker = start_worker(model, parallel=2)
    try:
        jobs = [Job(loop, request(stream=True), "served") for _ in range(2)]
        assert all(worker.submit(job) for job in jobs)
        worker.stop()
        worker.join(WAIT)
        assert sorted(worker.finished, key=jobs.index) == jobs
        assert all(job.finish_reason == "stop" and job.n_chunks == 1 for job in jobs)
        assert worker.pending == 0 and not model.barrier.broken
    finally:
        loop.close()
    assert "2 slot(s) (requests that run at once)" in capfd.readouterr().err


@pytest.mark.usefixtures("stand_in_completions")
def test_the_queue_holds_the_running_jobs_and_queue_size_more():
    model = ScriptedModel(n_chunks=1)
    model.gate.clear()  # the running jobs wait
    loop = asyncio.new_event_loop()
    worker = start_worker(model, parallel=2, queue_size=1)
    try:
        jobs = [Job(loop, request(stream=True), "served") for _ in range(4)]
        assert all(worker.submit(job) for job in jobs[:3])
        assert worker.pending == worker.capacity == 3
        assert not worker.submit(jobs[3])  # two run, one waits: full
        model.gate.set()
        worker.stop()
        worker.join(WAIT)
        assert sorted(worker.finished, key=jobs.index) == jobs[:3] and worker.pending == 0
    finally:
        loop.close()


# ---------------------------------------------------------------- a soak on the demo model

PARALLEL = 3
N_CTX = 256
CLIENTS = 6  # at most PARALLEL run and the rest wait: never more than the queue holds
KINDS = ("whole", "chat stream", "seeded", "disconnect", "over the context", "chat", "gone at once")
SOAK_WAIT = 300  # seconds the whole soak may take before it counts as stalled
SLICE = 6 * len(KINDS)  # requests between two memory readings
SLICES = 6  # after the warm-up; the memory check reads the last MEASURED of them
MEASURED = 4
# What the process may keep on top of what the engine says it keeps (see memory_reading):
# Python's heap and the allocator's arenas, which settle after the warm-up. The soak's
# growth was measured at a few MiB over 504 requests (issue 57), and so it stays over 12
# slices alone; but inside the whole suite, while the soak still adds kept graphs (more
# shapes since prompts may be cut anywhere), the heap grew 16.2 MiB beyond them once. A
# leak of the prompt cache's entries (test_the_memory_check_finds_a_cache_that_never_evicts)
# grows by more than 40 MiB over the same window.
RSS_MARGIN = 24 << 20
# What a kept graph costs beyond its compute buffers: ggml's scheduler and the graph's
# structs (measured: 1.5-1.7 MiB on the demo model; graph_cache.cpp keeps at most 64).
KEPT_GRAPH_BYTES = 2 << 20


@pytest.fixture(scope="module")
def demo(demo_model: Path) -> RiverModel:
    # a prompt cache small enough to be full after the warm-up: it then holds its size
    with RiverModel(
        demo_model, n_seq_max=PARALLEL, n_ctx=N_CTX, n_threads=2, river=None, prompt_cache=4 << 20, progress=False
    ) as model:
        yield model


def stream_then_hang_up(port: int, body: dict, *, wait_for_data: bool) -> bool:
    """Send a streamed request on a raw socket and close it: after its first event, or
    at once. Whether an event came."""
    data = json.dumps({**body, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=SOAK_WAIT) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data
        )
        received = b""
        while wait_for_data and b"data: " not in received:
            more = sock.recv(4096)
            if not more:
                break
            received += more
    return b"data: " in received


def one_request(port: int, i: int) -> str:
    """Request i of the soak (its kind by i); raises AssertionError on a wrong answer."""
    kind = KINDS[i % len(KINDS)]
    prompt = f"Request {i}: tell me about the rivers of the world, their names and their lengths"
    max_tokens = 1 + i % 6
    messages = [{"role": "user", "content": prompt}]
    if kind in ("whole", "seeded"):
        options = {"temperature": 0} if kind == "whole" else {"temperature": 0.8, "seed": i}
        status, _, answer = http_request(
            port, "POST", "/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, **options}
        )
        assert status == 200, answer
        assert answer["choices"][0]["finish_reason"] in ("stop", "length")
        assert 1 <= answer["usage"]["completion_tokens"] <= max_tokens
    elif kind in ("chat stream", "chat"):
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": kind == "chat stream"}
        status, _, answer = http_request(port, "POST", "/v1/chat/completions", body)
        assert status == 200, answer
        if kind == "chat stream":
            assert answer.rstrip().endswith("data: [DONE]")
        else:
            assert answer["choices"][0]["finish_reason"] in ("stop", "length")
    elif kind == "over the context":
        status, _, answer = http_request(
            port, "POST", "/v1/completions", {"prompt": list(range(100, 110 + N_CTX)), "max_tokens": 4}
        )
        assert status == 400 and answer["error"]["code"] == "context_length_exceeded", answer
    else:
        body = {"prompt": prompt, "max_tokens": 64, "temperature": 0.8, "seed": i, "stop": ["@@@@"]}
        came = stream_then_hang_up(port, body, wait_for_data=kind == "disconnect")
        assert came or kind == "gone at once"
    return kind


def run_requests(port: int, indices) -> list[str]:
    """The requests of `indices` from CLIENTS threads; their kinds, once every one ended."""
    with ThreadPoolExecutor(CLIENTS) as clients:
        futures = [clients.submit(one_request, port, i) for i in indices]
        return [future.result(timeout=SOAK_WAIT) for future in futures]


def settled(worker, model: RiverModel) -> bool:
    """Whether, within SOAK_WAIT, no job is left and every sequence is free."""
    deadline = time.monotonic() + SOAK_WAIT
    while time.monotonic() < deadline:
        if worker.pending == 0 and model.scheduler.in_use == 0:
            return True
        time.sleep(0.05)
    return False


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def memory_reading(model: RiverModel) -> SimpleNamespace:
    """The process's RSS, once the allocator has given back the free memory it holds
    (glibc's malloc_trim: freed memory is not a leak), and what the engine keeps by
    design: its kept graphs (at most 64, each holding compute buffers) and the prompt
    cache's entries (within their budget)."""
    libc = ctypes.CDLL(None)
    if hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
    stats = model.backbone.engine.graph_stats
    cache = model.backbone.prompt_cache
    return SimpleNamespace(
        rss=rss_bytes(),
        kept_graphs=stats["kept_graphs"],
        kept_bytes=stats["kept_bytes"],
        cache_bytes=cache.ram_used,
        cache_budget=cache.ram_bytes,
    )


def unexplained_growth(first: SimpleNamespace, last: SimpleNamespace) -> int:
    """RSS growth from `first` to `last` beyond what the kept graphs added. The prompt
    cache's growth is not subtracted: it is full after the warm-up, so a cache that
    keeps growing shows here, as any other leak does."""
    graphs = last.kept_bytes - first.kept_bytes + (last.kept_graphs - first.kept_graphs) * KEPT_GRAPH_BYTES
    return last.rss - first.rss - max(0, graphs)


def soak_with_readings(model: RiverModel, first_request: int) -> SimpleNamespace:
    """A warm-up slice, then SLICES slices of SLICE requests (from `first_request` on)
    on a live server with parallel=PARALLEL: what came back, whether the worker settled
    after each part, and a memory reading after each slice."""
    counter = itertools.count(first_request)
    with live_server(lambda: model, parallel=PARALLEL) as live:
        assert live.worker.ready.wait(WAIT)
        warm_up = run_requests(live.port, [next(counter) for _ in range(SLICE)])
        settled_after_warm_up = settled(live.worker, model)
        kinds, readings = [], []
        for _ in range(SLICES):
            kinds += run_requests(live.port, [next(counter) for _ in range(SLICE)])
            readings.append(memory_reading(model))
        settled_after_soak = settled(live.worker, model)
        cancelled = sum(job.finish_reason == CANCELLED for job in live.worker.finished)  # of the last 32
        status, _, _ = http_request(live.port, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2})
    return SimpleNamespace(
        warm_up=warm_up,
        kinds=kinds,
        settled=(settled_after_warm_up, settled_after_soak),
        readings=readings,
        status_after=status,
        cancelled=cancelled,
        shared_batches=model.scheduler.shared_batches,
    )


def growth_report(readings: list) -> str:
    return ", ".join(f"{r.rss / 2**20:.0f} MiB ({r.kept_graphs} graphs)" for r in readings)


# two soaks of different requests (the request index picks each prompt, seed and length),
# so that a flaky check shows in one CI run
@pytest.fixture(scope="module", params=[0, 100_000], ids=["requests-from-0", "requests-from-100000"])
def soak(demo, request) -> SimpleNamespace:
    return soak_with_readings(demo, request.param)


@pytest.mark.real_model
@pytest.mark.slow
def test_a_soak_of_mixed_requests_loses_nothing_and_stalls_nothing(soak):
    assert sorted(soak.warm_up) == sorted(KINDS * 6)
    assert sorted(soak.kinds) == sorted(KINDS * 36)  # each answered as its kind must be
    assert soak.settled == (True, True)  # no job left, every sequence free
    assert soak.status_after == 200
    assert soak.cancelled > 0  # clients that hung up stopped their generations
    assert soak.shared_batches > 0  # requests ran together


@pytest.mark.real_model
@pytest.mark.slow
def test_memory_is_flat_over_the_soaks_last_slices(soak):
    first, last = soak.readings[-MEASURED], soak.readings[-1]
    assert last.cache_bytes <= last.cache_budget
    assert last.kept_graphs <= 64
    growth = unexplained_growth(first, last)
    assert growth < RSS_MARGIN, f"{growth / 2**20:.1f} MiB beyond the kept graphs: {growth_report(soak.readings)}"


@pytest.mark.real_model
@pytest.mark.slow
def test_the_memory_check_finds_a_cache_that_never_evicts(demo_model, monkeypatch):
    """The check above, on a soak whose prompt cache keeps every entry (its budget
    ignored): a leak of what each request leaves, which the check must report."""
    with RiverModel(
        demo_model, n_seq_max=PARALLEL, n_ctx=N_CTX, n_threads=2, river=None, prompt_cache=4 << 20, progress=False
    ) as leaking:
        monkeypatch.setattr(type(leaking.backbone.prompt_cache), "ram_used", property(lambda self: 0))
        readings = soak_with_readings(leaking, 200_000).readings
    first, last = readings[-MEASURED], readings[-1]
    assert unexplained_growth(first, last) >= RSS_MARGIN, growth_report(readings)
