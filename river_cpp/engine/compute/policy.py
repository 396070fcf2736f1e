"""When a token leaves the backbone: per-depth similarity thresholds.

A token that has run d backbone layers leaves when the cosine similarity between
the residual stream entering and leaving block d-1 exceeds ``thresholds[d]``; the
rest of its layers then run on the river. The similarity measures how much a block
still changes the hidden state: 1 means "did nothing". On SmolLM2-135M it sits
mostly between 0.93 and 0.99, so useful thresholds lie close to 1 (e.g. 0.97-0.995).
``inf`` never exits at that depth and ``-inf`` always does. At d = 0 no block has
run; the similarity counts as 1, so only a threshold below 1 exits there.

The signal compared with the thresholds is the paper's cosine similarity by default;
``signal="update_norm"`` uses 1 - |h_d - h_{d-1}| / |h_{d-1}| instead (the relative
size of the block's update, also 1 for "did nothing").
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

NEVER = math.inf
ALWAYS = -math.inf
SIGNALS = ("cosine", "update_norm")
FILE_FORMAT = "river-cpp-policy/1"


@dataclass(frozen=True)
class ExitPolicy:
    """Per-depth exit thresholds: ``thresholds[d]`` for the first depths, ``beyond``
    for every deeper one. Every constructor is this one mechanism.

    >>> ExitPolicy.uniform(0.99, min_layer=4).resolve(6)
    [inf, inf, inf, inf, 0.99, 0.99]
    """

    thresholds: tuple[float, ...] = ()
    beyond: float = NEVER
    signal: str = "cosine"

    def __post_init__(self) -> None:
        if self.signal not in SIGNALS:
            raise ValueError(f"signal must be one of {SIGNALS}, got {self.signal!r}")
        values = tuple(float(t) for t in self.thresholds)
        if any(math.isnan(t) for t in values) or math.isnan(float(self.beyond)):
            raise ValueError("exit thresholds must not be NaN")
        object.__setattr__(self, "thresholds", values)
        object.__setattr__(self, "beyond", float(self.beyond))

    @classmethod
    def never(cls) -> ExitPolicy:
        """Every token runs the full backbone."""
        return cls()

    @classmethod
    def at_layer(cls, k: int) -> ExitPolicy:
        """Every token runs exactly k backbone layers, then the river (k = 0: all river)."""
        _check_depth("exit layer", k)
        return cls((NEVER,) * k + (ALWAYS,))

    @classmethod
    def uniform(
        cls, tau: float, *, min_layer: int = 1, max_layer: Optional[int] = None, signal: str = "cosine"
    ) -> ExitPolicy:
        """Exit when the signal exceeds ``tau``, checked after ``min_layer`` up to
        ``max_layer`` backbone layers (None: up to the last layer)."""
        if isinstance(tau, bool) or not isinstance(tau, (int, float)) or math.isnan(tau):
            raise ValueError(f"tau must be a number, got {tau!r}")
        _check_depth("min_layer", min_layer)
        if max_layer is None:
            return cls((NEVER,) * min_layer, beyond=tau, signal=signal)
        _check_depth("max_layer", max_layer)
        if max_layer < min_layer:
            raise ValueError(f"max_layer ({max_layer}) must be >= min_layer ({min_layer})")
        return cls((NEVER,) * min_layer + (float(tau),) * (max_layer - min_layer + 1), signal=signal)

    def to_json(self, **about: Any) -> str:
        """The policy as JSON (infinite thresholds as "inf" / "-inf"); `about` records
        where it came from (model, target, measured quality) and is ignored on load."""
        return (
            json.dumps(
                {
                    "format": FILE_FORMAT,
                    "signal": self.signal,
                    "thresholds": [_encode(t) for t in self.thresholds],
                    "beyond": _encode(self.beyond),
                    "about": about,
                },
                indent=2,
            )
            + "\n"
        )

    @classmethod
    def from_json(cls, text: str) -> ExitPolicy:
        """The policy of to_json's output; ValueError names what is wrong with other text."""
        try:
            data = json.loads(text)
        except ValueError as error:
            raise ValueError(f"not a river-cpp policy (invalid JSON: {error})") from None
        if not isinstance(data, dict) or data.get("format") != FILE_FORMAT:
            raise ValueError(f'not a river-cpp policy (expected "format": "{FILE_FORMAT}")')
        thresholds = data.get("thresholds")
        if not isinstance(thresholds, list):
            raise ValueError("a river-cpp policy needs a list of thresholds")
        return cls(
            tuple(_decode(t) for t in thresholds), _decode(data.get("beyond", "inf")), data.get("signal", "cosine")
        )

    def save(self, path: Union[str, os.PathLike], **about: Any) -> None:
        """Write to_json(**about) to `path`."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json(**about))

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> ExitPolicy:
        """The policy saved at `path` (by save or `river-cpp calibrate`)."""
        with open(path, encoding="utf-8") as f:
            return cls.from_json(f.read())

    def exits(self, n_layer: Optional[int] = None) -> bool:
        """Whether a token of an n_layer model may leave the backbone under this policy
        (the one test of "does this decode exit?"); n_layer None, before a model is
        loaded: at any depth the policy names."""
        if n_layer is None:
            return any(t != NEVER for t in (*self.thresholds, self.beyond))
        return any(t != NEVER for t in self.resolve(n_layer))

    def resolve(self, n_layer: int) -> list[float]:
        """The n_layer thresholds this policy means for a model of n_layer layers.

        Depth n_layer (the full backbone) needs no threshold; a policy that names a
        depth beyond it does not fit the model.
        """
        if len(self.thresholds) > n_layer + 1:
            raise ValueError(
                f"this policy sets thresholds up to depth {len(self.thresholds) - 1}; the model has {n_layer} layers"
            )
        padded = list(self.thresholds) + [self.beyond] * (n_layer - len(self.thresholds))
        return padded[:n_layer]


def _check_depth(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


def _encode(threshold: float) -> Union[float, str]:
    return threshold if math.isfinite(threshold) else ("inf" if threshold > 0 else "-inf")


def _decode(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f'a threshold must be a number, "inf" or "-inf", got {value!r}')
    try:
        return float(value)
    except ValueError:
        raise ValueError(f'a threshold must be a number, "inf" or "-inf", got {value!r}') from None


def exit_policy(
    *,
    tau: Optional[float] = None,
    exit_layer: Optional[int] = None,
    policy: Union[ExitPolicy, Mapping[str, Any], None] = None,
    min_layer: int = 2,
) -> Optional[ExitPolicy]:
    """The lossy exit policy that one of `tau` (a uniform threshold from min_layer on),
    `exit_layer` (every token runs exactly that many backbone layers) or `policy` (an
    ExitPolicy, or the object `river-cpp calibrate` writes) asks for; None when none
    is given. The CLI, the server and chat all turn their options into a policy here.
    ValueError when more than one is given or a value is out of range."""
    given = [
        name for name, value in (("tau", tau), ("exit_layer", exit_layer), ("policy", policy)) if value is not None
    ]
    if len(given) > 1:
        raise ValueError(f"give one of tau, exit_layer and policy, not {' and '.join(given)}")
    if tau is not None:
        if isinstance(tau, bool) or not isinstance(tau, (int, float)):
            raise ValueError(f"tau must be a number, got {tau!r}")
        return ExitPolicy.uniform(float(tau), min_layer=min_layer)
    if exit_layer is not None:
        return ExitPolicy.at_layer(exit_layer)
    if isinstance(policy, Mapping):
        return ExitPolicy.from_json(json.dumps(policy))
    if policy is not None and not isinstance(policy, ExitPolicy):
        raise TypeError(f"policy must be an ExitPolicy or a policy object, got {type(policy).__name__}")
    return policy


def check_policy(policy: object, *, n_layer: int, has_river: bool) -> None:
    """TypeError / ValueError unless `policy` is an ExitPolicy that applies to a model
    of n_layer layers with (or without) a river."""
    if not isinstance(policy, ExitPolicy):
        raise TypeError(f"policy must be an ExitPolicy, got {type(policy).__name__}")
    if policy.exits(n_layer) and not has_river:  # exits() checks the depths too
        raise ValueError("this model has no river (river=None): only ExitPolicy.never() applies")
