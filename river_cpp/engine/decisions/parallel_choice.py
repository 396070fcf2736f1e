"""How many requests a server runs at once on this file and host: as many as a batched
step serves for less than their separate steps.

A forward of k sequences, one row each, multiplies every matrix by k columns: the cost
of a verify of k positions, V(k) in plain steps, which the river choice already times
per file, thread count and kernel set (river_cpp.engine.decisions.river_choice.backbone_timings).
Where V(k) is near k (a matrix type whose product runs column by column, or a host
whose cores a step already fills), batching k sequences gains nothing and delays each
one's tokens behind the others', so the server serves fewer at a time, down to one.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional, Union

from river_cpp.engine.decisions.river_choice import backbone_timings

# A batched step must cost under this share of the separate steps it replaces, per
# sequence: where it is close to 1 the timing's noise decides, and each sequence of a
# batch waits for the whole batch.
PAYS = 0.9
# The most requests `serve --parallel auto` (the default) runs at once.
AUTO_MOST = 4


@dataclasses.dataclass(frozen=True)
class ParallelChoice:
    """The slots (requests run at once) for `wanted` on one file and host, and why."""

    wanted: int
    slots: int
    costs: dict[int, float]  # k sequences -> a batched step's cost in plain steps, V(k)

    def describe(self) -> str:
        """One line for `river-cpp info MODEL` and the server's startup line."""
        if self.wanted == 1:
            return "parallel: 1 slot, as asked"
        if self.slots == self.wanted:
            v = self.costs[self.slots]
            return (
                f"parallel: {self.slots} slots: a step batched over {self.slots} sequences costs {v:.2f} plain "
                f"steps, {v / self.slots:.2f} of a step each"
            )
        v = self.costs[self.wanted]
        held = f"{self.slots} slot{'s' if self.slots > 1 else ''}"
        return (
            f"parallel: {held}: a step batched over {self.wanted} sequences costs {v:.2f} plain steps, "
            f"{v / self.wanted:.2f} of a step each (batching pays below {PAYS:.2f}), so requests beyond "
            f"{self.slots} wait their turn; --parallel {self.wanted} batches them anyway"
        )

    def as_dict(self) -> dict:
        """Plain data (JSON-serializable), for `river-cpp info MODEL --json`."""
        return {"wanted": self.wanted, "slots": self.slots, "costs": {str(k): v for k, v in self.costs.items()}}


def weigh_parallel(wanted: int, verify_cost: Callable[[int], float]) -> ParallelChoice:
    """The most sequences k <= wanted whose batched step, verify_cost(k) plain steps,
    costs under PAYS of k separate steps (1 where none does).

    >>> weigh_parallel(4, lambda k: 1 + 0.3 * (k - 1)).slots
    4
    >>> weigh_parallel(4, lambda k: 0.95 * k + 0.05).slots
    1
    """
    if wanted < 1:
        raise ValueError(f"wanted must be a positive number of sequences, got {wanted}")
    costs = {k: float(verify_cost(k)) for k in range(2, wanted + 1)}
    slots = max((k for k, v in costs.items() if v < PAYS * k), default=1)
    return ParallelChoice(wanted, slots, costs)


def choose_parallel(
    model_path: Union[str, os.PathLike], wanted: int = AUTO_MOST, *, n_threads: int, timer: Optional[Callable] = None
) -> ParallelChoice:
    """weigh_parallel on the backbone's timed verify curve (timed on first use, cached
    with the river choice's; timer as river_choice.backbone_timings takes it)."""
    return weigh_parallel(wanted, backbone_timings(model_path, n_threads=n_threads, timer=timer).verify_cost)
