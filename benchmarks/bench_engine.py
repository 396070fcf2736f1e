"""Engine parity: prefill and decode tokens/s of river-cpp's backbone vs llama.cpp
(through llama-cpp-python) on the same GGUF file, with the same threads and tokens.

A script, not a test: it prints a table and can write JSON. River is off (river=None)
so both engines do the same work; how River compares is another benchmark's job.

    python benchmarks/bench_engine.py --model model.gguf --threads 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Callable, Optional, Protocol, Sequence

import llama_cpp
import numpy as np

import river_cpp

# Any English text: only its token count matters. Repeated until the prompt is long enough.
PROMPT_TEXT = (
    "A river is a natural flowing watercourse, usually freshwater, flowing towards an "
    "ocean, sea, lake or another river. In some cases a river flows into the ground and "
    "becomes dry at the end of its course without reaching another body of water. Small "
    "rivers can be referred to using names such as creek, brook, rivulet, and rill. "
)
# Tokens in the cache before the timed decode steps start.
DECODE_CONTEXT_TOKENS = 16


# ---------------------------------------------------------------- engines


class Engine(Protocol):
    name: str

    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        """From an empty cache: the last position's logits."""

    def decode(self, token: int) -> np.ndarray:
        """Append one token: its logits."""


class RiverEngine:
    """river-cpp's backbone, exit disabled."""

    name = "river-cpp"

    def __init__(self, model_path: str, n_ctx: int, threads: int) -> None:
        self.model = river_cpp.RiverModel(model_path, n_ctx=n_ctx, n_threads=threads, river=None)

    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        self.model.reset()
        return self.model.forward(ids, last_only=True)[0]

    def decode(self, token: int) -> np.ndarray:
        return self.model.forward([token], last_only=True)[0]


class LlamaEngine:
    """llama.cpp configured like RiverModel: same threads for batches and single tokens,
    512-token batches, no flash attention, logits of the last position only."""

    name = "llama.cpp"

    def __init__(self, model_path: str, n_ctx: int, threads: int) -> None:
        self.llama = llama_cpp.Llama(
            model_path, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
            n_batch=512, n_ubatch=512, logits_all=False, flash_attn=False, verbose=False,
        )

    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        self.llama.reset()
        self.llama.eval(ids)
        return self._last_logits()

    def decode(self, token: int) -> np.ndarray:
        self.llama.eval([token])
        return self._last_logits()

    def _last_logits(self) -> np.ndarray:
        # Copied out, as RiverModel.forward returns them: both engines hand Python the logits.
        pointer = llama_cpp.llama_get_logits_ith(self.llama.ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(self.llama.n_vocab(),)).copy()


# ---------------------------------------------------------------- measurements


def prefill_tokens_per_second(engine: Engine, prompt_ids: Sequence[int]) -> float:
    start = time.perf_counter()
    engine.prefill(prompt_ids)
    return len(prompt_ids) / (time.perf_counter() - start)


def decode_tokens_per_second(engine: Engine, context_ids: Sequence[int], decode_ids: Sequence[int]) -> float:
    """Feed `decode_ids` one at a time after an untimed prefill of `context_ids`."""
    engine.prefill(context_ids)
    start = time.perf_counter()
    for token in decode_ids:
        engine.decode(token)
    return len(decode_ids) / (time.perf_counter() - start)


def greedy_continuation(engine: Engine, context_ids: Sequence[int], n_tokens: int) -> list[int]:
    """The ids both engines are fed while decoding, computed once."""
    logits = engine.prefill(context_ids)
    ids = []
    for _ in range(n_tokens):
        ids.append(int(np.argmax(logits)))
        logits = engine.decode(ids[-1])
    return ids


def interleaved(measure: Callable[[Engine], float], engines: Sequence[Engine], repeats: int) -> dict[str, list[float]]:
    """`repeats` rounds of A, B, ... after one untimed warm-up round."""
    for engine in engines:
        measure(engine)
    samples: dict[str, list[float]] = {engine.name: [] for engine in engines}
    for _ in range(repeats):
        for engine in engines:
            samples[engine.name].append(measure(engine))
    return samples


def prompt_ids(model: river_cpp.RiverModel, n_tokens: int) -> list[int]:
    """The first `n_tokens` tokens of PROMPT_TEXT, repeated as often as needed."""
    tokens_per_copy = len(model.tokenize(PROMPT_TEXT, add_bos=False))
    return model.tokenize(PROMPT_TEXT * (n_tokens // tokens_per_copy + 1), add_bos=True)[:n_tokens]


# ---------------------------------------------------------------- report


def summary(samples: dict[str, list[float]]) -> dict:
    river = statistics.median(samples[RiverEngine.name])
    llama = statistics.median(samples[LlamaEngine.name])
    return {"samples": samples, "median": {RiverEngine.name: river, LlamaEngine.name: llama}, "ratio": river / llama}


def print_table(title: str, rows: dict[str, dict]) -> None:
    print(title)
    print(f"{'median tokens/s':<18}{RiverEngine.name:>12}{LlamaEngine.name:>12}{'river/llama':>13}")
    for label, row in rows.items():
        median = row["median"]
        print(f"{label:<18}{median[RiverEngine.name]:>12.1f}{median[LlamaEngine.name]:>12.1f}{row['ratio']:>13.3f}")


def default_model_path() -> str:
    from river_cpp.demo import demo_backbone_path

    return str(demo_backbone_path())


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="GGUF file (default: the demo backbone, SmolLM2-135M F16)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompt-tokens", type=int, default=128, help="prefill length")
    parser.add_argument("--decode-tokens", type=int, default=64, help="single-token steps per decode run")
    parser.add_argument("--n-ctx", type=int, default=512)
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results here")
    args = parser.parse_args(argv)
    if max(args.prompt_tokens, DECODE_CONTEXT_TOKENS + args.decode_tokens) > args.n_ctx:
        parser.error("--n-ctx is too small for --prompt-tokens / --decode-tokens")

    model_path = args.model or default_model_path()
    river = RiverEngine(model_path, args.n_ctx, args.threads)
    llama = LlamaEngine(model_path, args.n_ctx, args.threads)
    engines = [river, llama]

    prompt = prompt_ids(river.model, args.prompt_tokens)
    context = prompt[:DECODE_CONTEXT_TOKENS]
    decode_ids = greedy_continuation(river, context, args.decode_tokens)
    # Not needed for timing (both are fed decode_ids), but a sign both compute the same model.
    agree = greedy_continuation(llama, context, args.decode_tokens) == decode_ids

    rows = {
        f"prefill ({len(prompt)})": summary(
            interleaved(lambda engine: prefill_tokens_per_second(engine, prompt), engines, args.repeats)
        ),
        f"decode ({len(decode_ids)})": summary(
            interleaved(lambda engine: decode_tokens_per_second(engine, context, decode_ids), engines, args.repeats)
        ),
    }
    # Other processes on the same cores make every number noisy: say how busy the machine was.
    load_average = os.getloadavg()[0]
    print_table(
        f"{model_path}, {args.threads} threads, {args.repeats} repeats, interleaved "
        f"(load average {load_average:.1f} on {os.cpu_count()} CPUs)", rows,
    )
    print(f"greedy continuations of both engines agree: {'yes' if agree else 'NO'}")
    if args.json:
        report = {
            "model": model_path, "threads": args.threads, "repeats": args.repeats, "n_ctx": args.n_ctx,
            "versions": {"river_cpp": river_cpp.__version__, "llama_cpp_python": llama_cpp.__version__},
            "load_average": load_average, "greedy_agree": agree, "results": rows,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
