"""The model's threads: a bounded FIFO of jobs, each a request's generation,
reporting to the event loop and stopping when cancelled.

One thread loads the model; then `parallel` threads take jobs in arrival order and
run them, each on a sequence of its own (a model loaded with n_seq_max = parallel:
river_cpp.engine.compute.scheduler), their forwards batched together. The event loop only
queues jobs and reads their events, and never waits on the model. Nothing here knows
HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sys
import threading
from collections import deque
from typing import Any, Callable, Optional

from river_cpp.apps.server.config import DEFAULT_QUEUE_SIZE
from river_cpp.apps.server.protocol import APIError, ParsedRequest, overflow_error
from river_cpp.completions import CANCELLED, create_chat_completion, create_completion
from river_cpp.engine.compute.context import ContextOverflowError
from river_cpp.engine.compute.prompt_cache import cache_scope

log = logging.getLogger("river_cpp.apps.server")


class Job:
    """One request's generation: runs on the worker thread, reports to the event loop.

    Events on `events` (an asyncio.Queue of `loop`): ("chunk", dict) for each chunk of
    a stream, ("result", dict) for a whole answer, ("error", APIError), and always
    ("done",) last. Setting `cancel` stops the generation at its next token.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, request: ParsedRequest, model_id: str, *, scope: str = ""
    ) -> None:
        self.loop = loop
        self.scope = scope  # the prompt cache's scope (river_cpp.engine.compute.prompt_cache.cache_scope)
        self.request = request
        self.model_id = model_id
        self.events: asyncio.Queue[tuple] = asyncio.Queue()
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
                self.finish_reason = CANCELLED
                return
            request = self.request
            call = create_chat_completion if request.chat else create_completion
            out = call(model, request.prompt, **request.options, cancel=self.cancel, model_name=self.model_id)
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
                        self.finish_reason = CANCELLED
                        break
            finally:
                out.close()
        except ContextOverflowError as error:
            self._post("error", overflow_error(error, chat=self.request.chat))
        except (ValueError, TypeError) as error:
            self._post("error", APIError(400, str(error)))
        except Exception as error:  # noqa: BLE001 - a failed generation must not kill the worker
            log.exception("generation failed")
            self._post("error", APIError(500, f"generation failed: {error}", kind="server_error"))
        finally:
            self._post("done")


class ModelWorker:
    """The threads that load and run the model; jobs wait in a bounded FIFO."""

    def __init__(self, load: Callable[[], Any], *, queue_size: int = DEFAULT_QUEUE_SIZE, parallel: int = 1) -> None:
        self._load = load
        self.parallel = parallel
        self.capacity = queue_size + parallel  # the running jobs and those waiting
        self._jobs: queue.Queue[Optional[Job]] = queue.Queue()
        self._pending = 0
        self._count_lock = threading.Lock()
        self.model: Any = None
        self.load_error: Optional[BaseException] = None
        self.ready = threading.Event()
        self.finished: deque[Job] = deque(maxlen=32)  # the latest jobs, for tests and logs
        self._thread = threading.Thread(target=self._main, name="river-cpp-model", daemon=True)
        self._runners: list[threading.Thread] = []

    def start(self) -> None:
        """Start the thread: it loads the model, then runs jobs until stop()."""
        self._thread.start()

    def stop(self) -> None:
        """Let the threads end after the jobs queued before this call."""
        for _ in range(self.parallel):
            self._jobs.put(None)

    def join(self, timeout: Optional[float] = None) -> None:
        """Wait for the threads to end (after stop())."""
        self._thread.join(timeout)
        for runner in self._runners:
            runner.join(timeout)

    @property
    def slots(self) -> int:
        """Sequences of the model's KV cache: requests that run at once (the API's and the
        startup line's word, as llama-server's)."""
        return getattr(self.model, "n_seq_max", 1)

    @property
    def pending(self) -> int:
        """Jobs running or waiting."""
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
        self._runners = [
            threading.Thread(target=self._run_jobs, name=f"river-cpp-job-{i}", daemon=True)
            for i in range(self.parallel)
        ]
        for runner in self._runners:
            runner.start()
        kv = getattr(self.model, "kv_bytes_per_sequence", None)
        print(
            f"river-cpp serve: loaded; {self.slots} slot(s) (requests that run at once), "
            f"{getattr(self.model, 'n_ctx', '?')} positions each"
            + (f", KV cache {kv / 2**20:.1f} MiB per slot" if kv else "")
            + f"; {self.capacity - self.parallel} may wait",
            file=sys.stderr,
            flush=True,
        )
        self.ready.set()

    def _run_jobs(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                # the model keeps each sequence's tokens for the next request of the same
                # scope only (river_cpp.engine.compute.scheduler)
                with cache_scope(job.scope):
                    job.run(self.model)
            finally:
                self.finished.append(job)
                with self._count_lock:
                    self._pending -= 1
