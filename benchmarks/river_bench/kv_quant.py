"""A q8_0 KV cache against F16: the cache's bytes and how far it moves the model's
next-token distributions, on long real inputs, ours beside llama-cpp-python's same option
(benchmarks/kv_quant.py is its command line).

Inputs: the documents of the long-input set (benchmarks/river_bench/data/long_inputs: two
standard-library modules and a licence text, 1.5-2.5k tokens with their first request), in
the model's chat template, as token ids both sides read alike.

Per side, two models of the same file, one with an F16 cache and one with q8_0 K and V,
read each document in prompt chunks of CHUNK positions, side by side; at every position,
KL(F16 || q8_0) of the next-token distributions (nats) and whether both rank the same
token first. Ours: RiverModel(own_attention=True, type_k=type_v="q8_0") against
RiverModel(own_attention=True) (our attention reads any chunking to the same bits, so the
chunk size changes nothing there). llama-cpp-python: Llama(flash_attn=True, type_k=8,
type_v=8) (llama.cpp's quantized V needs its flash attention) against Llama(flash_attn=True),
so that only the cache differs.

Bytes: our caches as allocated (Engine.kv_bytes) per position; llama.cpp stores the same
ggml block_q8_0 (32 values and an F16 scale, 34 bytes against F16's 64), so the ratio is
the format's on both sides.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from river_bench.whole_requests import load_set, task_messages

SIDES = ("ours", "llama")
CHUNK = 128  # positions per prompt chunk
QUANTIZED = "q8_0"
GGML_TYPE_Q8_0 = 8  # llama.cpp's number for q8_0 (llama-cpp-python's type_k / type_v)


@dataclass
class Divergence:
    """One side's q8_0 cache against its F16 cache over every position read."""

    kl: list[float] = field(default_factory=list)  # per document: the sum of KL over its positions
    positions: list[int] = field(default_factory=list)
    same_top1: int = 0
    kv_bytes: dict[str, int] = field(default_factory=dict)  # per cache type, as allocated (ours only)

    @property
    def mean_kl(self) -> float:
        return sum(self.kl) / max(1, sum(self.positions))

    @property
    def top1_agreement(self) -> float:
        return self.same_top1 / max(1, sum(self.positions))

    @property
    def bytes_ratio(self) -> Optional[float]:
        return self.kv_bytes[QUANTIZED] / self.kv_bytes["f16"] if self.kv_bytes else None


def documents(
    tokenize_chat: Callable[[list[dict[str, str]]], list[int]], max_positions: int
) -> list[tuple[str, list[int]]]:
    """(name, token ids) of each document of the long-input set with its first request;
    max_positions > 0 keeps each document's first that many positions."""
    texts, tasks = load_set()
    out = []
    for name in dict.fromkeys(t.document for t in tasks):  # the default set's, in order
        task = next(t for t in tasks if t.document == name)
        ids = tokenize_chat(task_messages(texts, task))
        out.append((name, ids[:max_positions] if max_positions > 0 else ids))
    return out


class OurSide:
    """Two RiverModels of one file: an F16 cache and a q8_0 one, our attention on both."""

    def __init__(self, path: str, *, n_ctx: int, n_threads: int) -> None:
        from river_cpp import RiverModel

        common = dict(river=None, n_ctx=n_ctx, n_threads=n_threads, own_attention=True, progress=False)
        self.models = {
            "f16": RiverModel(path, **common),
            QUANTIZED: RiverModel(path, type_k=QUANTIZED, type_v=QUANTIZED, **common),
        }

    def reset(self) -> None:
        for model in self.models.values():
            model.reset()

    def logits(self, kind: str, chunk: Sequence[int]) -> np.ndarray:
        return np.asarray(self.models[kind].forward(list(chunk)))

    def kv_bytes(self) -> dict[str, int]:
        return {kind: model.engine.kv_bytes for kind, model in self.models.items()}

    def close(self) -> None:
        for model in self.models.values():
            model.close()


class LlamaSide:
    """Two llama-cpp-python Llamas of one file, flash attention on both: an F16 cache and
    type_k = type_v = 8 (q8_0)."""

    def __init__(self, path: str, *, n_ctx: int, n_threads: int) -> None:
        from river_cpp.engine.compute.llama_backbone import load_llama

        common: dict[str, Any] = dict(
            n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads, logits_all=True, flash_attn=True, verbose=False
        )
        self.models = {
            "f16": load_llama(path, **common),
            QUANTIZED: load_llama(path, type_k=GGML_TYPE_Q8_0, type_v=GGML_TYPE_Q8_0, **common),
        }

    def reset(self) -> None:
        for llm in self.models.values():
            llm.reset()

    def logits(self, kind: str, chunk: Sequence[int]) -> np.ndarray:
        llm = self.models[kind]
        llm.eval(list(chunk))
        return np.array(llm.scores[llm.n_tokens - len(chunk) : llm.n_tokens])

    def kv_bytes(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        for llm in self.models.values():
            llm.close()


def open_side(name: str, path: str, *, n_ctx: int, n_threads: int) -> Any:
    if name not in SIDES:
        raise ValueError(f"unknown side {name!r} (known: {', '.join(SIDES)})")
    return (OurSide if name == "ours" else LlamaSide)(os.fspath(path), n_ctx=n_ctx, n_threads=n_threads)


def measure(
    side: Any, inputs: Sequence[tuple[str, list[int]]], *, progress: Callable[[str], None] = print
) -> Divergence:
    """`side`'s q8_0 cache against its F16 cache over every position of `inputs`."""
    from river_cpp.measure.evaluate import kl_divergence

    result = Divergence(kv_bytes=side.kv_bytes())
    for name, ids in inputs:
        side.reset()
        total, n = 0.0, 0
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start : start + CHUNK]
            reference, quantized = side.logits("f16", chunk), side.logits(QUANTIZED, chunk)
            total += float(kl_divergence(reference, quantized).sum())
            result.same_top1 += int((reference.argmax(-1) == quantized.argmax(-1)).sum())
            n += len(chunk)
        result.kl.append(total)
        result.positions.append(n)
        progress(f"{name}: {n} positions, mean KL {total / max(1, n):.6f} nats")
    return result


def report(results: dict[str, Divergence], *, n_ctx: int) -> str:
    """A markdown table: per side, positions, mean KL, top-1 agreement and the bytes."""
    lines = [
        f"| side | positions | mean KL(F16 to q8_0), nats | top-1 agreement | KV bytes at n_ctx {n_ctx} (q8_0 / F16) |",
        "|---|---|---|---|---|",
    ]
    for name, r in results.items():
        ratio = r.bytes_ratio
        size = (
            f"{r.kv_bytes[QUANTIZED] / 2**20:.1f} / {r.kv_bytes['f16'] / 2**20:.1f} MiB ({ratio:.4f}x)"
            if ratio is not None
            else "the same format (34 / 64 bytes per 32 values)"
        )
        lines.append(f"| {name} | {sum(r.positions)} | {r.mean_kl:.6f} | {r.top1_agreement:.4f} | {size} |")
    return "\n".join(lines)
