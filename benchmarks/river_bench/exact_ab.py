"""What exact rows cost and give: per exact mode ("off", ggml's kernels by batch size,
as before issue 40; "on", the default; "bitwise"), the default's and plain decoding's
speed (whole answers, the prompt's prefill included) over the grounded and chat prompt
sets, and how many default answers equal the plain ones token for token
(benchmarks/exact_ab.py is its command line).

The modes are loaded side by side and interleaved prompt by prompt, so a machine's
drift falls on all of them alike; times are wall-clock and valid on a quiet machine only.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from river_cpp import RiverModel

from river_bench.prompts import prompt_set

MODES = ("off", "on", "bitwise")
# The goal sets: 16 input-grounded prompts and 10 chat ones.
PROMPTS = {"grounded": 16, "chat": 10}


@dataclass
class ModeRun:
    """One exact mode on one prompt set."""

    mode: str
    kind: str
    identical: int = 0
    answers: int = 0
    plain_tokens_per_s: list[float] = field(default_factory=list)  # whole answers, prefill included
    default_tokens_per_s: list[float] = field(default_factory=list)
    decode_ratios: list[float] = field(default_factory=list)  # the default's decode speed over plain's, per answer
    control_ratios: list[float] = field(default_factory=list)  # plain's again over plain's (the noise), per answer
    first_differences: list[int] = field(default_factory=list)  # token index where an answer parted

    def summary(self) -> dict:
        plain = statistics.fmean(self.plain_tokens_per_s)
        default = statistics.fmean(self.default_tokens_per_s)
        return {
            "mode": self.mode,
            "kind": self.kind,
            "identical": f"{self.identical}/{self.answers}",
            "plain_tokens_per_s": round(plain, 2),
            "default_tokens_per_s": round(default, 2),
            "default_over_plain": round(default / plain, 3),
            "decode_over_plain": round(statistics.fmean(self.decode_ratios or [math.nan]), 3),
            "worst_decode_over_plain": round(min(self.decode_ratios, default=math.nan), 3),
            "decode_ratios": [round(r, 3) for r in self.decode_ratios],
            "control_ratios": [round(r, 3) for r in self.control_ratios],
            "first_differences": self.first_differences,
        }


def _timed(model: RiverModel, prompt: str, max_tokens: int, **options) -> tuple[list[int], float, float]:
    """An answer's tokens, its whole speed (prefill included) and its decode speed."""
    model.reset()
    start = time.perf_counter()
    result = model.generate(prompt, max_tokens=max_tokens, **options)
    whole = len(result.token_ids) / (time.perf_counter() - start)
    return result.token_ids, whole, result.generation_tokens_per_second


def run(
    path: str,
    *,
    modes: Sequence[str] = MODES,
    prompts: Mapping[str, int] = PROMPTS,
    max_tokens: int = 256,
    n_threads: int = 2,
    control: bool = False,
    sampling: Optional[Mapping[str, Any]] = None,
) -> list[ModeRun]:
    """Each mode's runs on the file at `path` (no river: the default's free drafts),
    over `prompts` (set name: how many of its prompts). With `control`, plain decoding
    runs again after the default, and its decode speed over the first run's is the
    noise an answer's ratio must be read against (an A/A control). sampling: the
    sampling options of every call, plain and drafted alike (None: greedy)."""
    sampling = dict(sampling or {})
    models = {
        mode: RiverModel(path, n_ctx=4096, n_threads=n_threads, river=None, progress=False, exact=mode)
        for mode in modes
    }
    try:
        runs = []
        tokenizer = next(iter(models.values())).tokenizer
        for kind, n_prompts in prompts.items():
            by_mode = {mode: ModeRun(mode, kind) for mode in modes}
            for prompt in prompt_set(tokenizer, kind, n_prompts):
                for mode, model in models.items():
                    plain, plain_speed, plain_decode = _timed(model, prompt, max_tokens, speculative=False, **sampling)
                    drafted, default_speed, default_decode = _timed(model, prompt, max_tokens, **sampling)
                    entry = by_mode[mode]
                    entry.answers += 1
                    entry.identical += drafted == plain
                    if drafted != plain:
                        pairs = zip(plain + [-1], drafted + [-2])
                        entry.first_differences.append(next(i for i, (a, b) in enumerate(pairs) if a != b))
                    entry.plain_tokens_per_s.append(plain_speed)
                    entry.default_tokens_per_s.append(default_speed)
                    if plain_decode > 0 and default_decode > 0:  # answers of one token have no decode
                        entry.decode_ratios.append(default_decode / plain_decode)
                    if control and plain_decode > 0:
                        _, _, again = _timed(model, prompt, max_tokens, speculative=False, **sampling)
                        entry.control_ratios.append(again / plain_decode)
            runs += by_mode.values()
        return runs
    finally:
        for model in models.values():
            model.close()
