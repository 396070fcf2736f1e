"""River on the demo model: a tau sweep with its controls, against the backbone.

For each River configuration, teacher-forced along the backbone's greedy output
(one decode step per token, so every token takes its own exit):
  - quality vs the backbone: mean/p99 KL divergence, same-top-1 rate, and greedy
    tokens-until-divergence (the configuration's own greedy run);
  - controls at the same mean depth: a static split (every token exits at the
    rounded mean) and a random assignment of the same exit depths;
  - decode speed, interleaved and repeated with the backbone and with llama.cpp on
    the backbone GGUF and on its quantizations (the quant ladder), as ratios.

    python benchmarks/bench_river.py --threads 2 --json river.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import llama_cpp
import numpy as np

from river_cpp import RiverModel
from river_cpp.cache import cache_dir
from river_cpp.demo import demo_backbone_path
from river_cpp.evaluate import (ForcedRun, QualityReport, backbone_reference, greedy_tokens, teacher_forced,
                                tokens_until_divergence)
from river_cpp.policy import ExitPolicy

PROMPTS = [
    "<|im_start|>user\nWrite a short story about a lighthouse keeper.<|im_end|>\n<|im_start|>assistant\n",
    "def merge_sorted(a, b):\n    \"\"\"Merge two sorted lists into one sorted list.\"\"\"\n",
    "The French Revolution began in 1789 when",
    "<|im_start|>user\nExplain why the sky is blue in simple terms.<|im_end|>\n<|im_start|>assistant\n",
]
LADDER = {"Q8_0": 7, "Q6_K": 18, "Q5_K_M": 17, "Q4_K_M": 15, "Q4_0": 2}  # llama_ftype values


@dataclass
class Config:
    name: str
    policy: ExitPolicy
    prefill: str = "exit"
    tail_layers: int = 0
    river_head: bool = False

    def load(self, backbone: Path, river: str, threads: int) -> RiverModel:
        return RiverModel(backbone, river=river, n_ctx=512, n_threads=threads, policy=self.policy,
                          prefill=self.prefill, tail_layers=self.tail_layers, river_head=self.river_head,
                          progress=False)


@dataclass
class Row:
    name: str
    mean_exit_layer: float
    mean_kl: float
    p99_kl: float
    same_top1: float
    tokens_until_divergence: float
    decode_tok_s: float = float("nan")
    vs_backbone: float = float("nan")
    vs_llama_backbone: float = float("nan")
    vs_llama_q4_0: float = float("nan")


# ---------------------------------------------------------------- quality


def forced_over_prompts(model: RiverModel, prompts, continuations, before_step=None) -> list[ForcedRun]:
    runs = []
    for index, (prompt, continuation) in enumerate(zip(prompts, continuations)):
        step = (lambda i, index=index: before_step(index, i)) if before_step else None
        runs.append(teacher_forced(model, prompt, continuation, before_step=step))
    return runs


def pooled(runs: Sequence[ForcedRun]) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([r.logits for r in runs]), np.concatenate([r.exit_layers for r in runs])


def divergence(model: RiverModel, prompts, continuations) -> float:
    return float(np.mean([tokens_until_divergence(c, greedy_tokens(model, p, len(c)))
                          for p, c in zip(prompts, continuations)]))


def quality_row(name, model, prompts, continuations, reference_logits, before_step=None) -> Row:
    logits, exits = pooled(forced_over_prompts(model, prompts, continuations, before_step))
    q = QualityReport.compare(reference_logits, logits)
    until = divergence(model, prompts, continuations) if before_step is None else float("nan")
    return Row(name, float(exits.mean()), q.mean_kl, q.p99_kl, q.same_top1, until), exits


def llama_quality(path: Path, prompts, continuations, reference_logits, threads: int) -> QualityReport:
    llm = llama_cpp.Llama(str(path), n_ctx=512, n_threads=threads, n_threads_batch=threads, logits_all=True,
                          verbose=False)
    rows = []
    for prompt, continuation in zip(prompts, continuations):
        llm.reset()
        llm.eval(list(prompt) + list(continuation[:-1]))
        rows.append(np.array(llm.scores[len(prompt) - 1: len(prompt) - 1 + len(continuation)]))
    llm.close()
    return QualityReport.compare(reference_logits, np.concatenate(rows))


# ---------------------------------------------------------------- speed


def decode_speed(prefill: Callable, decode: Callable, prompts, continuations) -> Callable[[], float]:
    """Tokens/s of the decode steps over every prompt (prefill untimed)."""
    def run() -> float:
        seconds, n = 0.0, 0
        for prompt, tokens in zip(prompts, continuations):
            prefill(prompt)
            start = time.perf_counter()
            for token in tokens:
                decode(token)
            seconds += time.perf_counter() - start
            n += len(tokens)
        return n / seconds
    return run


def river_decode(model: RiverModel, config: Config, prompts, continuations) -> Callable[[], float]:
    def prefill(prompt) -> None:
        model.policy, model.prefill = config.policy, config.prefill
        model.reset()
        model.forward(prompt, last_only=True)
    return decode_speed(prefill, lambda t: model.forward([t], last_only=True), prompts, continuations)


def llama_decode(llm: llama_cpp.Llama, prompts, continuations) -> Callable[[], float]:
    def prefill(prompt) -> None:
        llm.reset()
        llm.eval(list(prompt))
    return decode_speed(prefill, lambda t: llm.eval([t]), prompts, continuations)


def interleaved(runs: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            samples[name].append(run())
    return {name: statistics.median(values) for name, values in samples.items()}


def quantize(backbone: Path, name: str, ftype: int) -> Path:
    out = cache_dir() / f"{backbone.stem}.{name}.gguf"
    if not out.is_file():
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = ftype
        params.allow_requantize = True
        if llama_cpp.llama_model_quantize(str(backbone).encode(), str(out).encode(), ctypes.byref(params)) != 0:
            raise RuntimeError(f"llama.cpp could not quantize {backbone} to {name}")
    return out


# ---------------------------------------------------------------- main


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="backbone GGUF (default: the demo backbone)")
    parser.add_argument("--river", default="q4_0")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64, help="generated tokens per prompt")
    parser.add_argument("--taus", type=float, nargs="+", default=[0.95, 0.96, 0.97, 0.98, 0.99])
    parser.add_argument("--min-layer", type=int, default=2)
    parser.add_argument("--variant-tau", type=float, default=0.98,
                        help="tau of the prefill / tail / river-head variants")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    backbone = Path(args.model) if args.model else demo_backbone_path()
    with RiverModel(backbone, river=args.river, n_ctx=512, n_threads=args.threads) as model:
        prompts = [model.tokenize(p, special=True) for p in PROMPTS]
        references = [backbone_reference(model, p, args.tokens) for p in prompts]
    continuations = [c for c, _ in references]
    reference_logits = np.concatenate([run.logits for _, run in references])
    rng = np.random.default_rng(0)

    uniform = {tau: ExitPolicy.uniform(tau, min_layer=args.min_layer) for tau in args.taus + [args.variant_tau]}
    configs = [Config(f"tau={tau}", uniform[tau]) for tau in args.taus]
    variant = uniform[args.variant_tau]
    configs += [
        Config(f"tau={args.variant_tau} prefill=backbone", variant, prefill="backbone"),
        Config(f"tau={args.variant_tau} tail=2", variant, tail_layers=2),
        Config(f"tau={args.variant_tau} tail=4", variant, tail_layers=4),
        Config(f"tau={args.variant_tau} river head", variant, river_head=True),
    ]
    backbone_config = Config("backbone (river-cpp)", ExitPolicy.never())
    models = {c.name: c.load(backbone, args.river, args.threads) for c in configs + [backbone_config]}
    rows: list[Row] = []
    for config in configs:
        model = models[config.name]
        row, exits = quality_row(config.name, model, prompts, continuations, reference_logits)
        rows.append(row)
        if config.name.startswith(f"tau={args.variant_tau} "):
            continue
        static_k = int(round(row.mean_exit_layer))
        model.policy = ExitPolicy.at_layer(static_k)
        rows.append(quality_row(f"  static k={static_k}", model, prompts, continuations, reference_logits)[0])
        # the same exit depths, shuffled over positions
        shuffled = rng.permutation(exits)
        offsets = np.cumsum([0] + [len(c) for c in continuations])

        def force(prompt_index: int, step: int, shuffled=shuffled, offsets=offsets, model=model) -> None:
            model.policy = ExitPolicy.at_layer(int(shuffled[offsets[prompt_index] + step]))
        rows.append(quality_row("  random same depths", model, prompts, continuations, reference_logits, force)[0])
        model.policy = config.policy

    speed = {c.name: river_decode(models[c.name], c, prompts, continuations) for c in [backbone_config] + configs}
    llamas = {"llama.cpp F16": llama_cpp.Llama(str(backbone), n_ctx=512, n_threads=args.threads,
                                               n_threads_batch=args.threads, verbose=False)}
    ladder_quality = {}
    for name, ftype in LADDER.items():
        path = quantize(backbone, name, ftype)
        ladder_quality[name] = llama_quality(path, prompts, continuations, reference_logits, args.threads)
        llamas[f"llama.cpp {name}"] = llama_cpp.Llama(str(path), n_ctx=512, n_threads=args.threads,
                                                      n_threads_batch=args.threads, verbose=False)
    speed.update({name: llama_decode(llm, prompts, continuations) for name, llm in llamas.items()})
    tok_s = interleaved(speed, args.repeats)

    for row in rows:
        if row.name in tok_s:
            row.decode_tok_s = tok_s[row.name]
            row.vs_backbone = tok_s[row.name] / tok_s["backbone (river-cpp)"]
            row.vs_llama_backbone = tok_s[row.name] / tok_s["llama.cpp F16"]
            row.vs_llama_q4_0 = tok_s[row.name] / tok_s["llama.cpp Q4_0"]
    for name in ["backbone (river-cpp)", "llama.cpp F16"] + [f"llama.cpp {n}" for n in LADDER]:
        q = ladder_quality.get(name.removeprefix("llama.cpp "))
        rows.append(Row(name, float("nan"), q.mean_kl if q else 0.0, q.p99_kl if q else 0.0,
                        q.same_top1 if q else 1.0, float("nan"), tok_s[name], tok_s[name] / tok_s["backbone (river-cpp)"],
                        tok_s[name] / tok_s["llama.cpp F16"], tok_s[name] / tok_s["llama.cpp Q4_0"]))
    print_table(rows, backbone, args)
    if args.json:
        args.json.write_text(json.dumps({"model": str(backbone), "threads": args.threads,
                                         "tokens_per_prompt": args.tokens, "prompts": len(PROMPTS),
                                         "rows": [asdict(r) for r in rows]}, indent=2))


def print_table(rows: Sequence[Row], backbone: Path, args) -> None:
    print(f"\n{backbone.name}, river {args.river}, {args.threads} threads, {len(PROMPTS)} prompts x "
          f"{args.tokens} tokens, teacher-forced on the backbone's greedy output\n")
    print("| configuration | mean exit | mean KL | p99 KL | same top-1 | tokens until div. | decode tok/s "
          "| / backbone | / llama F16 | / llama Q4_0 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.name} | {r.mean_exit_layer:.2f} | {r.mean_kl:.4f} | {r.p99_kl:.3f} | {r.same_top1:.3f} | "
              f"{r.tokens_until_divergence:.1f} | {r.decode_tok_s:.1f} | {r.vs_backbone:.2f} | "
              f"{r.vs_llama_backbone:.2f} | {r.vs_llama_q4_0:.2f} |")


if __name__ == "__main__":
    main()
