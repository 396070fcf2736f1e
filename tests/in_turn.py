"""Streams read in turn on one thread, a chunk of each at a time: what the tests of
leased sequences (river_cpp.engine.compute.scheduler) run their streams with."""

from __future__ import annotations

from typing import Callable, Iterator, Sequence


def read_in_turn(streams: Sequence[Iterator], keep: Callable = lambda chunk: chunk) -> list[list]:
    """A chunk of each stream in turn, on this thread, until all are exhausted; what
    `keep` takes of each stream's chunks."""
    out: list[list] = [[] for _ in streams]
    live = list(range(len(streams)))
    while live:
        for i in list(live):
            try:
                out[i].append(keep(next(streams[i])))
            except StopIteration:
                live.remove(i)
    return out
