"""What both token loops build on: a Step, bringing the cache to a prompt, and one
decode step.

The plain loop (river_cpp.decoding.generation) and the speculative loop
(river_cpp.decoding.speculative) both yield Steps and both start with `prefill`; neither
imports the other's module for them.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import numpy as np

from river_cpp.engine.compute.backbone import Backbone
from river_cpp.engine.compute.policy import ExitPolicy


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


def prefill(
    model: Backbone, prompt_ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None
) -> Prefilled:
    """Bring the cache to `prompt_ids`, reusing the longest prefix it or the prompt
    cache holds; the last position's logits and how many positions were reused."""
    keep = model.reuse_prefix(prompt_ids, route=route, policy=policy)
    logits = model.forward(prompt_ids[keep:], last_only=True, route=route, policy=policy, prompt=True)[0]
    return Prefilled(logits, keep)


def decode_one_token(model: Backbone, token: int, *, policy: Optional[ExitPolicy] = None) -> np.ndarray:
    """Append one token to the model's cache; its logits [n_vocab]."""
    return model.forward([token], last_only=True, route="decode", policy=policy)[0]
