"""Forwards of several sequences run together: the continuous batching of a graph
backbone whose cache holds more than one sequence.

Each generation runs on its own thread and calls forward on its own sequence; the
call waits here while one thread, the batcher's, gathers what every sequence in use
has asked and runs it as one batch (`_core.Engine.forward_many`). A sequence joins
or leaves between batches. A long prompt is cut into chunks while other sequences
are in use, so that their tokens keep flowing; alone, it runs whole.

Nothing here changes a token: the engine computes each sequence's rows as a forward
of that sequence alone computes them, and with our own attention (on the CPU) a
prompt's rows are the same bits wherever it is cut, so what is batched with what, and
where a prompt is cut, decide only the speed. (With ggml's attention, own_attention
off or on a device, a prompt's rows may differ in the last bits by where it was cut.)
Knows nothing of decoding or of which sequence a request gets
(river_cpp.engine.sequences).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from river_cpp.engine import _core

# Rows a prompt adds to a batch it shares with other sequences: small enough that a
# shared batch costs a few steps, not a whole prompt.
DEFAULT_CHUNK = 64
# How long a batch waits, after its first request, for the other sequences in use to
# ask (each asks again a moment after its last batch, once it has sampled).
DEFAULT_WAIT_S = 0.004


@dataclass(eq=False)
class ForwardRequest:
    """One sequence's forward: its ids, how far batches have run them, and the result."""

    seq: int
    ids: np.ndarray
    last_only: bool
    prompt: bool
    exit: Optional[_core.ExitConfig]
    batchable: bool  # may share a batch: exits decided by no check, and not longer than a batch
    done: int = 0
    pieces: list[np.ndarray] = field(default_factory=list)
    exit_layers: list[np.ndarray] = field(default_factory=list)
    error: Optional[BaseException] = None
    finished: threading.Event = field(default_factory=threading.Event)


# (seq, ids, last_only, prompt) per row, an exit configuration -> per row, (logits, exit layers)
RunRows = Callable[[Sequence[tuple[int, np.ndarray, bool, bool]], Optional[_core.ExitConfig]], list]


class ForwardBatcher:
    """Runs the sequences' forwards in batches on its own thread. An error of the
    engine is the request's whose rows raised it; should the thread itself fail, every
    request pending then and every later one fails with a RuntimeError saying so (none
    waits for a thread that is gone)."""

    def __init__(
        self, run: RunRows, n_batch: int, *, chunk: int = DEFAULT_CHUNK, wait_s: float = DEFAULT_WAIT_S
    ) -> None:
        """`run(rows, exit)` computes rows of several sequences in one batch (one row:
        that sequence alone, any length, any exit)."""
        if chunk < 1 or n_batch < chunk:
            raise ValueError(f"chunk must be in [1, n_batch], got {chunk}")
        self._run = run
        self.n_batch = n_batch
        self.chunk = chunk
        self.wait_s = wait_s
        self._condition = threading.Condition()
        self._pending: deque[ForwardRequest] = deque()
        self._running: list[ForwardRequest] = []  # the batch being computed
        self._failure: Optional[BaseException] = None  # what ended the thread outside a request's run
        self._in_use = 0  # sequences held by generations (river_cpp.engine.sequences)
        self._closed = False
        self.batches = 0  # batches run, and of them, those of several sequences
        self.shared_batches = 0
        self.rows = 0  # rows of sequences computed, over all batches
        self.compute_seconds = 0.0  # in the engine
        self._thread = threading.Thread(target=self._main, name="river-cpp-batcher", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the thread after the batch it runs; later forwards raise."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    @property
    def in_use(self) -> int:
        """Sequences held by generations now."""
        return self._in_use

    def hold(self, delta: int) -> None:
        """A generation took (+1) or gave back (-1) a sequence: how many a batch waits for."""
        with self._condition:
            self._in_use = max(0, self._in_use + delta)
            self._condition.notify_all()

    def forward(self, request: ForwardRequest) -> tuple[np.ndarray, np.ndarray]:
        """Run `request` in the batches to come; its logits and exit layers (as
        _core.Engine.forward's). Raises what the engine raised for it."""
        with self._condition:
            if self._failure is not None:
                raise self._failed()
            if self._closed:
                raise ValueError("this RiverModel is closed")
            self._pending.append(request)
            self._condition.notify_all()
        request.finished.wait()
        if request.error is not None:
            raise request.error
        logits = request.pieces[0] if len(request.pieces) == 1 else np.concatenate(request.pieces)
        return logits, np.concatenate(request.exit_layers)

    # ---------------------------------------------------------------- the batcher's thread

    def _main(self) -> None:
        try:
            while True:
                with self._condition:
                    batch = self._next_batch()
                    if batch is None:
                        return
                    self._running = [request for request, _ in batch[0]]
                self._compute(*batch)
                self._running = []
        except BaseException as failure:  # noqa: BLE001 - every request waiting on the thread hears of it
            self._fail_all(failure)

    def _failed(self) -> RuntimeError:
        error = RuntimeError(f"the batcher's thread failed, so this model computes no more: {self._failure!r}")
        error.__cause__ = self._failure
        return error

    def _fail_all(self, failure: BaseException) -> None:
        """The thread ends on `failure`: each request pending or in the batch it ran
        fails with an error, and so does every later one."""
        with self._condition:
            self._failure = failure
            self._closed = True
            for request in [*self._running, *self._pending]:
                if not request.finished.is_set():
                    request.error = self._failed()
                    request.finished.set()
            self._pending.clear()
            self._running = []
            self._condition.notify_all()

    def _next_batch(self) -> Optional[tuple[list[tuple[ForwardRequest, int]], Optional[_core.ExitConfig]]]:
        """Under the condition: wait for requests, then for the other sequences in use
        to ask (at most wait_s), and take a batch: (request, rows) pairs and its exit."""
        while not self._pending:
            if self._closed:
                return None
            self._condition.wait()
        deadline = time.monotonic() + self.wait_s
        while not self._closed and len({r.seq for r in self._pending}) < self._in_use:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._condition.wait(left)
        first = self._pending[0]
        if not first.batchable:
            self._pending.popleft()
            return [(first, len(first.ids))], first.exit
        shared = self._in_use > 1 or len(self._pending) > 1
        taken: list[tuple[ForwardRequest, int]] = []
        budget = self.n_batch
        for request in list(self._pending):
            if not request.batchable or request.exit is not first.exit or budget == 0:
                continue
            left = len(request.ids) - request.done
            if request.prompt:  # a prompt may be cut: in chunks while it shares the batch
                n = min(left, budget, self.chunk if shared else budget)
            elif left <= budget:  # a step or a verify goes whole
                n = left
            else:
                continue
            taken.append((request, n))
            budget -= n
            if request.done + n == len(request.ids):
                self._pending.remove(request)
        return taken, first.exit

    def _compute(self, taken: list[tuple[ForwardRequest, int]], exit: Optional[_core.ExitConfig]) -> None:
        rows = [(r.seq, r.ids[r.done : r.done + n], r.last_only, r.prompt) for r, n in taken]
        self.batches += 1
        self.shared_batches += len(rows) > 1
        self.rows += sum(len(ids) for _, ids, _, _ in rows)
        start = time.perf_counter()
        try:
            results = self._run(rows, exit)
        except BaseException as error:  # noqa: BLE001 - each request gets its own outcome
            if len(rows) == 1:
                results = [error]
            else:  # the engine left every sequence as it was: find whose rows failed
                results = []
                for row in rows:
                    try:
                        results.append(self._run([row], exit)[0])
                    except BaseException as alone:  # noqa: BLE001
                        results.append(alone)
        self.compute_seconds += time.perf_counter() - start
        for (request, n), result in zip(taken, results):
            self._deliver(request, n, result)

    def _deliver(self, request: ForwardRequest, n: int, result) -> None:
        with self._condition:
            if isinstance(result, BaseException):
                request.error = result
                if request in self._pending:
                    self._pending.remove(request)
                request.finished.set()
                return
            logits, exit_layers = result
            request.done += n
            final = request.done == len(request.ids)
            if final or not request.last_only:
                request.pieces.append(logits)
            request.exit_layers.append(exit_layers)
            if final:
                request.finished.set()
