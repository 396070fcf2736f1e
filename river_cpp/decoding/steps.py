"""What both token loops build on: a Step, bringing the cache to a prompt, and one
decode step.

The plain loop (river_cpp.decoding.generation) and the speculative loop
(river_cpp.decoding.speculative) both yield Steps and both start with `prefill`; neither
imports the other's module for them. Each is a request loop (river_cpp.engine.compute.requests):
it yields what it asks of its sequence and is sent the results.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import numpy as np

from river_cpp.engine.compute.backbone import Backbone
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.engine.compute.requests import Forward, Requests, call, run_alone


class Step(NamedTuple):
    """One token of the loop: its id, the logits it was chosen from ([n_vocab]; a
    view the next step may overwrite: copy to keep), the full-precision layers of
    the forward that produced them (n_layer: the backbone's, or a verified token) and
    the positions that forward took from the cache instead of computing them (a
    prefill's reused prompt prefix; 0 for every later token)."""

    token: int
    logits: np.ndarray
    exit_layer: int
    cached_tokens: int = 0


class Prefilled(NamedTuple):
    """A prefill's last-position logits [n_vocab] and the prompt positions it reused."""

    logits: np.ndarray
    cached_tokens: int


def prefill_requests(
    prompt_ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None
) -> Requests:
    """Bring the cache to `prompt_ids`, reusing the longest prefix it or the prompt
    cache holds; returns the last position's logits and how many positions were reused."""
    keep = yield call("reuse_prefix", prompt_ids, route=route, policy=policy)
    logits = yield Forward(prompt_ids[keep:], last_only=True, route=route, policy=policy, prompt=True)
    return Prefilled(logits[0], keep)


def prefill(
    model: Backbone, prompt_ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None
) -> Prefilled:
    """prefill_requests run on `model` at once (a draft model's own cache, a test)."""
    return run_alone(model, prefill_requests(prompt_ids, route=route, policy=policy))


def decode_one_token(token: int, *, policy: Optional[ExitPolicy] = None) -> Requests:
    """Append one token to the cache; returns its logits [n_vocab]."""
    logits = yield Forward([token], last_only=True, route="decode", policy=policy)
    return logits[0]
