"""Forwards of several sequences run together: what goes in each batch of a graph
backbone whose cache holds more than one sequence, and running it.

The scheduler (river_cpp.engine.compute.scheduler) gathers the forward each running generation
asks and hands them here: take_batch picks a batch, run_batch computes it as one
(`_core.Engine.forward_many`), `deliver` hands each request its rows. A sequence joins
or leaves between batches. A long prompt is cut into chunks while other sequences
are in use, so that their tokens keep flowing; alone, it runs whole.

Nothing here changes a token: the engine computes each sequence's rows as a forward
of that sequence alone computes them, and with our own attention (on the CPU) a
prompt's rows are the same bits wherever it is cut, so what is batched with what, and
where a prompt is cut, decide only the speed. (With ggml's attention, own_attention
off or on a device, a prompt's rows may differ in the last bits by where it was cut.)
Knows nothing of decoding, of threads, or of which sequence a generation gets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from river_cpp.engine import _core

# Rows a prompt adds to a batch it shares with other sequences: small enough that a
# shared batch costs a few steps, not a whole prompt.
DEFAULT_CHUNK = 64


@dataclass(eq=False)
class ForwardRequest:
    """One sequence's forward: its ids, how far batches have run them, and its rows so far."""

    seq: int
    ids: np.ndarray
    last_only: bool
    prompt: bool
    exit: Optional[_core.ExitConfig]
    batchable: bool  # may share a batch: exits decided by no check, and not longer than a batch
    done: int = 0
    pieces: list[np.ndarray] = field(default_factory=list)
    exit_layers: list[np.ndarray] = field(default_factory=list)
    n_past: int = 0  # what the sequence held before it (where a failure rewinds it to)

    @property
    def finished(self) -> bool:
        return self.done == len(self.ids)

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """Its logits and exit layers, as _core.Engine.forward's, once finished."""
        logits = self.pieces[0] if len(self.pieces) == 1 else np.concatenate(self.pieces)
        return logits, np.concatenate(self.exit_layers)


# (seq, ids, last_only, prompt) per row, an exit configuration -> per row, (logits, exit layers)
RunRows = Callable[[Sequence[tuple[int, np.ndarray, bool, bool]], Optional[_core.ExitConfig]], list]


def check_chunk(chunk: int, n_batch: int) -> int:
    """`chunk` where it may cut prompts in a batch of n_batch rows; ValueError otherwise."""
    if chunk < 1 or n_batch < chunk:
        raise ValueError(f"chunk must be in [1, n_batch], got {chunk}")
    return chunk


def take_batch(
    pending: Sequence[ForwardRequest], n_batch: int, chunk: int, shared: bool
) -> tuple[list[tuple[ForwardRequest, int]], Optional[_core.ExitConfig]]:
    """The next batch of `pending` (in the order they asked; not empty): (request, rows)
    pairs and its exit. `shared`: other sequences are in use, so a prompt goes in
    chunks. The first request decides the exit; one that may not share a batch goes
    alone."""
    first = pending[0]
    if not first.batchable:
        return [(first, len(first.ids) - first.done)], first.exit
    shared = shared or len(pending) > 1
    taken: list[tuple[ForwardRequest, int]] = []
    budget = n_batch
    for request in pending:
        if not request.batchable or request.exit is not first.exit or budget == 0:
            continue
        left = len(request.ids) - request.done
        if request.prompt:  # a prompt may be cut: in chunks while it shares the batch
            n = min(left, budget, chunk if shared else budget)
        elif left <= budget:  # a step or a verify goes whole
            n = left
        else:
            continue
        taken.append((request, n))
        budget -= n
    return taken, first.exit


def run_batch(run: RunRows, taken: list[tuple[ForwardRequest, int]], exit: Optional[_core.ExitConfig]) -> list:
    """Compute a batch of take_batch: per request, (logits, exit layers) of its rows, or
    the error the engine raised for them (a batch that fails is run again row by row, to
    find whose rows failed: the engine left every sequence as it was)."""
    rows = [(r.seq, r.ids[r.done : r.done + n], r.last_only, r.prompt) for r, n in taken]
    try:
        return run(rows, exit)
    except Exception as error:  # noqa: BLE001 - each request gets its own outcome
        if len(rows) == 1:
            return [error]
        results: list = []
        for row in rows:
            try:
                results.append(run([row], exit)[0])
            except Exception as alone:  # noqa: BLE001
                results.append(alone)
        return results


def deliver(request: ForwardRequest, n: int, rows: tuple[np.ndarray, np.ndarray]) -> None:
    """Hand `request` the (logits, exit layers) of the n rows a batch ran of it."""
    logits, exit_layers = rows
    request.done += n
    if request.finished or not request.last_only:
        request.pieces.append(logits)
    request.exit_layers.append(exit_layers)
