"""What a decode loop asks of its sequence: the requests a generation yields.

A decode loop (river_cpp.decoding) is a generator. Where it needs its sequence it
yields a request and is sent the result: `logits = yield Forward(ids, last_only=True)`,
`yield Call("rewind", n)`, `n_past = yield Call("n_past")`. Anything else it yields is
an output for its reader (a Step, a chunk). Call("drafting_home") names what keeps
the draft memory of generations on the sequence (river_cpp.engine.compute.backbone.drafting_home).
Whoever drives it owns the sequence: one scheduler drives every generation of a model
(river_cpp.engine.compute.scheduler), batching their forwards; `alone` drives one on a
backbone directly, on the caller's thread.
An error of a request is thrown into the loop at its yield, as the call would raise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generator, Iterator, Mapping, Optional, Sequence

from river_cpp.engine.compute.backbone import drafting_home
from river_cpp.engine.compute.policy import ExitPolicy


@dataclass(frozen=True, eq=False)
class Forward:
    """Append `ids` to the sequence; the result is their logits (Backbone.forward's)."""

    ids: Sequence[int]
    last_only: bool = False
    route: str = "auto"
    policy: Optional[ExitPolicy] = None
    exit_vocab: Optional[int] = None
    prompt: bool = False

    def options(self) -> dict[str, Any]:
        """Backbone.forward's keywords."""
        return {
            "last_only": self.last_only,
            "route": self.route,
            "policy": self.policy,
            "exit_vocab": self.exit_vocab,
            "prompt": self.prompt,
        }


@dataclass(frozen=True, eq=False)
class Call:
    """Any other use of the sequence's backbone: a method called with `args` and
    `kwargs` (rewind, reset, reuse_prefix, ...), or a member read ("n_past",
    "last_exit_layers"); the result is what it returns."""

    name: str
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


def call(name: str, *args: Any, **kwargs: Any) -> Call:
    """Call(name, args, kwargs), written as the call it stands for."""
    return Call(name, args, kwargs)


# A decode loop: yields requests and outputs, is sent each request's result.
Requests = Generator[Any, Any, Any]


def perform(backbone: Any, request: Any) -> Any:
    """Run one request on `backbone` (the sequence's), alone."""
    if isinstance(request, Forward):
        return backbone.forward(request.ids, **request.options())
    if request.name == "drafting_home":
        return drafting_home(backbone)
    member = getattr(backbone, request.name)
    return member(*request.args, **request.kwargs) if callable(member) else member


def alone(backbone: Any, requests: Requests) -> Generator[Any, None, Any]:
    """Drive `requests` on `backbone` on this thread: each request runs there at once;
    the outputs are yielded, and the loop's return value returned. Closing this closes
    the loop."""
    result: Any = None
    error: Optional[BaseException] = None
    try:
        while True:
            try:
                item = requests.throw(error) if error is not None else requests.send(result)
            except StopIteration as done:
                return done.value
            result, error = None, None
            if isinstance(item, (Forward, Call)):
                try:
                    result = perform(backbone, item)
                except Exception as failed:  # noqa: BLE001 - the loop sees it where it asked
                    error = failed
            else:
                yield item
    finally:
        requests.close()


def run_alone(backbone: Any, requests: Requests) -> Any:
    """Drive a loop that yields no outputs (a prefill, a draft) on `backbone`; its value."""
    outputs: Iterator[Any] = alone(backbone, requests)
    try:
        item = next(outputs)
    except StopIteration as done:
        return done.value
    outputs.close()
    raise TypeError(f"a request loop run alone yielded an output: {item!r}")
