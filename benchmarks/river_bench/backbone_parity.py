"""The two backbones on one file: the default (exact drafts) on the graph and on llama.cpp's
context, plain decoding on each, and llama-cpp-python itself (plain and its prompt lookup),
whole requests (prefill plus decode), greedy, interleaved prompt by prompt.

What issue 38 asks of the llama.cpp backbone: the default against llama-cpp-python plain
and its prompt lookup, and against the graph's default; and the two backbones' prefill and
decode parity.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Union

from river_bench.prompts import prompt_set

# The defaults run first on each prompt, so that neither their prompt cache nor their
# draft memory can reuse what a plain run of the same prompt computed.
CONFIGS = ("graph-default", "llama.cpp-default", "graph-plain", "llama.cpp-plain", "lcp-plain", "lcp-lookup")


@dataclass
class Timing:
    """One configuration's whole requests on one prompt set."""

    seconds: list[float] = field(default_factory=list)  # whole request, per prompt
    prefill: list[float] = field(default_factory=list)
    decode_tps: list[float] = field(default_factory=list)
    tokens: list[list[int]] = field(default_factory=list)


def _river_runner(model, *, drafted: bool) -> Callable[[str, int], tuple[float, float, float, list[int]]]:
    def run(prompt: str, max_tokens: int):
        model.reset()  # a cold prefill, as llama-cpp-python's
        began = time.perf_counter()
        result = model.generate(prompt, max_tokens=max_tokens, temperature=0, speculative=None if drafted else False)
        whole = time.perf_counter() - began
        return whole, result.prompt_seconds, result.generation_tokens_per_second, list(result.token_ids)

    return run


def _lcp_runner(llm) -> Callable[[str, int], tuple[float, float, float, list[int]]]:
    def run(prompt: str, max_tokens: int):
        ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
        llm.reset()
        began = time.perf_counter()
        out = []
        first = None
        for token in llm.generate(ids, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True):
            first = first or time.perf_counter()
            out.append(int(token))
            if token == llm.token_eos() or len(out) == max_tokens:
                break
        whole = time.perf_counter() - began
        decode = whole - (first - began)
        return whole, first - began, (len(out) - 1) / decode if decode > 0 else 0.0, out

    return run


def measure(
    path: Union[str, os.PathLike], *, kinds: tuple[str, ...], n_prompts: int, max_tokens: int, n_threads: int
) -> dict[str, dict[str, Timing]]:
    """Timings by prompt set and configuration (CONFIGS), every configuration run on each
    prompt before the next prompt."""
    from river_cpp.engine.compute.llama_backbone import load_llama
    from river_cpp.measure.llama_peer import load_prompt_lookup
    from river_cpp.model import RiverModel

    graph = RiverModel(path, engine="graph", n_threads=n_threads, n_ctx=4096, progress=False)
    fallback = RiverModel(path, engine="llama.cpp", n_threads=n_threads, n_ctx=4096)
    plain_llm = load_llama(path, n_ctx=4096, n_threads=n_threads, n_threads_batch=n_threads, verbose=False)
    lookup_llm = load_prompt_lookup(path, n_ctx=4096, n_threads=n_threads, max_draft=10)
    runners = {
        "graph-plain": _river_runner(graph, drafted=False),
        "graph-default": _river_runner(graph, drafted=True),
        "llama.cpp-plain": _river_runner(fallback, drafted=False),
        "llama.cpp-default": _river_runner(fallback, drafted=True),
        "lcp-plain": _lcp_runner(plain_llm),
        "lcp-lookup": _lcp_runner(lookup_llm),
    }
    results: dict[str, dict[str, Timing]] = {}
    try:
        for kind in kinds:
            table = results[kind] = {name: Timing() for name in CONFIGS}
            for prompt in prompt_set(graph.tokenizer, kind, n_prompts):
                for name in CONFIGS:
                    whole, prefill, tps, tokens = runners[name](prompt, max_tokens)
                    timing = table[name]
                    timing.seconds.append(whole)
                    timing.prefill.append(prefill)
                    timing.decode_tps.append(tps)
                    timing.tokens.append(tokens)
    finally:
        graph.close()
        fallback.close()
        plain_llm.close()
        lookup_llm.close()
    return results


def report(results: dict[str, dict[str, Timing]]) -> str:
    """Per prompt set: each configuration's whole-request speed against llama-cpp-python
    plain (sum of seconds), its prefill and decode, and identical answers against plain."""
    lines = []
    for kind, table in results.items():
        base = sum(table["lcp-plain"].seconds)
        lines.append(f"{kind}: whole requests, speed against llama-cpp-python plain (greedy)")
        lines.append(f"  {'config':<18} {'x plain':>8} {'prefill s':>10} {'decode tok/s':>13} {'same as plain':>14}")
        for name, timing in table.items():
            reference = table["graph-plain" if name.startswith("graph") else "llama.cpp-plain"].tokens
            if name.startswith("lcp"):
                reference = table["lcp-plain"].tokens
            same = sum(a == b for a, b in zip(timing.tokens, reference))
            lines.append(
                f"  {name:<18} {base / sum(timing.seconds):>7.2f}x {sum(timing.prefill):>10.2f} "
                f"{sum(timing.decode_tps) / len(timing.decode_tps):>13.1f} {same:>8}/{len(timing.tokens)}"
            )
    return "\n".join(lines)
