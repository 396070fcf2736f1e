"""The measurement behind benchmarks/llama_agreement.py: our greedy answers against
llama-cpp-python's on the same file, with our own products and with ggml's kernels."""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np

from river_cpp.measure.evaluate import greedy_tokens
from river_cpp.measure.llama_peer import LlamaCppPeer
from river_cpp.model import RiverModel

from river_bench.prompts import prompt_set

# Per engine: RIVER_CPP_OWN_PRODUCTS and own_attention (the control: ggml's kernels and attention).
ENGINES = {"ours": ("auto", True), "ours, ggml's kernels": ("none", False)}


def parting(reference: Sequence[int], answer: Sequence[int]) -> Optional[int]:
    """The first position where the answers differ (None: identical)."""
    for i, (a, b) in enumerate(zip(reference, answer)):
        if a != b:
            return i
    return None if len(reference) == len(answer) else min(len(reference), len(answer))


def run(model_path: str, prompts: Mapping[str, int], n_tokens: int, n_threads: int) -> dict[str, dict]:
    """Per engine of ENGINES: identical answers, and each parting's position and logit
    gap (llama.cpp's logit of its token minus that of ours, in llama.cpp's logits there)."""
    reference = LlamaCppPeer(Path(model_path), n_ctx=4096, n_threads=n_threads)
    engines = {}
    for name, (own, own_attention) in ENGINES.items():
        os.environ["RIVER_CPP_OWN_PRODUCTS"] = own  # read when the backbone loads
        engines[name] = RiverModel(
            model_path, river=None, n_ctx=4096, n_threads=n_threads, progress=False, own_attention=own_attention
        )
    os.environ.pop("RIVER_CPP_OWN_PRODUCTS")
    results: dict[str, dict] = {name: {"identical": 0, "answers": 0, "partings": []} for name in engines}
    ours = engines["ours"]
    for kind, count in prompts.items():
        for prompt in prompt_set(ours.tokenizer, kind, count):
            ids = ours.tokenize(prompt, add_bos=True, special=True)
            expected = greedy_tokens(reference, ids, n_tokens)
            for name, model in engines.items():
                answer = greedy_tokens(model.backbone, ids, n_tokens)
                entry = results[name]
                entry["answers"] += 1
                at = parting(expected, answer)
                if at is None:
                    entry["identical"] += 1
                    continue
                reference.reset()
                logits = reference.forward(ids + expected[:at], last_only=True, route="backbone")[0]
                both = at < min(len(expected), len(answer))
                gap = float(logits[expected[at]] - logits[answer[at]]) if both else 0.0
                entry["partings"].append({"kind": kind, "at": at, "gap": gap})
    for entry in results.values():
        until = [pt["at"] for pt in entry["partings"]] + [n_tokens] * entry["identical"]
        entry["mean_tokens_until_divergence"] = statistics.fmean(until)
    return results


def report(results: Mapping[str, dict], n_tokens: int) -> str:
    lines = []
    for name, entry in results.items():
        gaps = [pt["gap"] for pt in entry["partings"]]
        gap_text = f"gaps at partings: median {np.median(gaps):.3f}, max {max(gaps):.3f}" if gaps else "no partings"
        lines.append(
            f"{name:22} identical {entry['identical']}/{entry['answers']}  "
            f"tokens until divergence {entry['mean_tokens_until_divergence']:.1f} of {n_tokens}  {gap_text}"
        )
    return "\n".join(lines)
