"""Whole requests on long real inputs: time to first token, whole-request time and decode
speed, against llama-cpp-python on the same file (benchmarks/whole_requests.py is its
command line).

Two workloads, greedy, every configuration on the same token ids:
- tasks: the long-input set (benchmarks/river_bench/data/long_inputs: two standard-library modules
  and a licence text, 1.5-2.5k tokens, with a question, a quote, an edit or a fresh
  request after each), every request from an empty cache (model.reset()), so that the
  prefill is paid as a new user's first request pays it;
- alternate: an app alternating between two documents, two turns each (A, B, A's
  follow-up, B's follow-up), on one model object per configuration kept as an app
  keeps it: whatever it reuses between requests counts (a prompt cache, llama-cpp-
  python's LlamaRAMCache).

Configurations: `plain` (ours, speculative=False), `default` (ours, the default
drafting; a model object of its own, so that its memory of earlier calls never holds
plain's answers), `llama` (llama-cpp-python's own loop, plain), and in `alternate`
`llama-ram` (the same with a LlamaRAMCache). The order rotates from request to request.
Our two rows are checked token for token against each other.

Per request: ttft (the call's start to its first token: prefill and the first
sampling), seconds (the whole call), and decode tokens/s (tokens after the first over
the time after it). Ratios are of whole-request time to `llama`'s on the same request.
Timings on a shared machine are distorted by its other work: say its load with them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

DATA = Path(__file__).resolve().parent / "data" / "long_inputs"
WORKLOADS = ("tasks", "alternate", "disk", "long")
DEFAULT_WORKLOADS = ("tasks", "alternate", "disk")  # "long": documents of 4k and 8k tokens, asked for by name
LONG_N_CTX = 10240  # the long workload's context: its 8k document, a request and an answer
CONFIGS = ("plain", "default", "llama", "llama-ram")
LLAMA_RAM_BYTES = 2 << 30  # LlamaRAMCache's capacity in `alternate`: the two documents' states fit
# The alternating app's follow-up turns, one per document.
FOLLOW_UPS = {
    "fnmatch": "Thanks. Which function of the module would you call to test many names at once, and why?",
    "sched": "Thanks. Show how to schedule a function to run in five seconds with this module.",
}


# ---------------------------------------------------------------- the requests


@dataclass(frozen=True)
class Task:
    """One request of the long-input set: a document, then a request about it."""

    name: str
    document: str
    kind: str  # "question", "quote", "edit" or "fresh"
    request: str
    max_tokens: int


def load_set(data: Path = DATA, key: str = "tasks") -> tuple[dict[str, str], list[Task]]:
    """(document name -> its text with its introduction, the tasks under `key`: "tasks",
    the default set, or "long_tasks") of tasks.json."""
    spec = json.loads((data / "tasks.json").read_text(encoding="utf-8"))
    documents = {
        name: d["intro"].format(content=(data / d["file"]).read_text(encoding="utf-8"))
        for name, d in spec["documents"].items()
    }
    tasks = [Task(**t) for t in spec[key]]
    for task in tasks:
        if task.document not in documents:
            raise ValueError(f"task {task.name!r} names an unknown document {task.document!r}")
    return documents, tasks


def chat_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """The token ids of `messages` in the model's chat template, as every configuration reads them."""
    return tokenizer.tokenize(tokenizer.apply_chat_template(messages), add_bos=True, special=True)


def task_messages(documents: dict[str, str], task: Task) -> list[dict[str, str]]:
    """The chat of a task: one user message, the document first."""
    return [{"role": "user", "content": documents[task.document] + task.request}]


# ---------------------------------------------------------------- what runs


@dataclass
class Timing:
    """One whole request of one configuration."""

    request: str
    ttft: float
    seconds: float
    prompt_tokens: int
    tokens: int
    token_ids: list[int] = field(default_factory=list)
    text: str = ""

    @property
    def decode_tokens_per_second(self) -> float:
        """Tokens after the first over the time after the first."""
        decode = self.seconds - self.ttft
        return (self.tokens - 1) / decode if self.tokens > 1 and decode > 0 else 0.0


class OurConfig:
    """A RiverModel generating greedily, plain or with its default drafting."""

    def __init__(self, name: str, model: Any, *, speculative: Optional[bool]) -> None:
        self.name, self.model, self.speculative = name, model, speculative

    def reset(self) -> None:
        self.model.reset()

    def run(self, request: str, prompt_ids: list[int], max_tokens: int) -> Timing:
        options = {} if self.speculative is None else {"speculative": self.speculative}
        start = time.perf_counter()
        result = self.model.generate(prompt_ids, max_tokens=max_tokens, temperature=0.0, **options)
        seconds = time.perf_counter() - start
        return Timing(
            request,
            result.prompt_seconds,
            seconds,
            len(prompt_ids),
            len(result.token_ids),
            result.token_ids,
            result.text,
        )


class LlamaConfig:
    """llama-cpp-python's own loop on the same file, plain, with or without its LlamaRAMCache."""

    def __init__(self, name: str, llama: Any) -> None:
        self.name, self.llama = name, llama

    def reset(self) -> None:
        self.llama.reset()

    def run(self, request: str, prompt_ids: list[int], max_tokens: int) -> Timing:
        start = time.perf_counter()
        first, count, text = None, 0, []
        for chunk in self.llama.create_completion(prompt_ids, max_tokens=max_tokens, temperature=0.0, stream=True):
            first = first if first is not None else time.perf_counter() - start
            choice = chunk["choices"][0]
            if choice["finish_reason"] is None:  # a token's chunk (the last one only says why it ended)
                count += 1
            text.append(choice["text"])
        seconds = time.perf_counter() - start
        return Timing(request, first or seconds, seconds, len(prompt_ids), count, [], "".join(text))


def open_configs(
    path: Path, names: Sequence[str], *, n_ctx: int, n_threads: int, prompt_cache: Any = None
) -> dict[str, Any]:
    """The configurations `names` on the GGUF at `path`. prompt_cache: passed to our
    models as RiverModel(prompt_cache=...) where given (None: the model's default)."""
    configs: dict[str, Any] = {}
    for name in names:
        if name not in CONFIGS:
            raise ValueError(f"unknown configuration {name!r} (known: {', '.join(CONFIGS)})")
        if name in ("plain", "default"):
            from river_cpp import RiverModel

            extra = {} if prompt_cache is None else {"prompt_cache": prompt_cache}
            model = RiverModel(str(path), n_ctx=n_ctx, n_threads=n_threads, **extra)
            configs[name] = OurConfig(name, model, speculative=False if name == "plain" else None)
        else:
            import llama_cpp

            from river_cpp.engine.compute.llama_backbone import load_llama

            llama = load_llama(path, n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads, verbose=False)
            if name == "llama-ram":
                llama.set_cache(llama_cpp.LlamaRAMCache(capacity_bytes=LLAMA_RAM_BYTES))
            configs[name] = LlamaConfig(name, llama)
    return configs


# ---------------------------------------------------------------- the workloads


def run_tasks(
    configs: dict[str, Any],
    tokenize_chat: Callable[[list[dict[str, str]]], list[int]],
    *,
    tasks: Optional[Sequence[Task]] = None,
    progress: Callable[[str], None] = print,
) -> dict[str, list[Timing]]:
    """The long-input set, each request from an empty cache, configurations rotating."""
    documents, every = load_set()
    chosen = list(tasks) if tasks is not None else every
    results: dict[str, list[Timing]] = {name: [] for name in configs}
    names = list(configs)
    for i, task in enumerate(chosen):
        ids = tokenize_chat(task_messages(documents, task))
        for name in names[i % len(names) :] + names[: i % len(names)]:
            configs[name].reset()
            timing = configs[name].run(task.name, ids, task.max_tokens)
            results[name].append(timing)
            progress(_line(name, timing))
    return results


def run_alternate(
    configs: dict[str, Any],
    tokenize_chat: Callable[[list[dict[str, str]]], list[int]],
    *,
    max_tokens: int = 128,
    progress: Callable[[str], None] = print,
) -> dict[str, list[Timing]]:
    """Two documents, two turns each, alternating (A, B, A's follow-up, B's), each
    configuration on its own model object, reset once before the first request only;
    `max_tokens` per answer."""
    documents, tasks = load_set()
    first = {t.document: t for t in tasks if t.document in FOLLOW_UPS and t.kind == "question"}
    results: dict[str, list[Timing]] = {name: [] for name in configs}
    names = list(configs)
    for name in names:
        configs[name].reset()
    chats: dict[tuple[str, str], list[dict[str, str]]] = {}
    order = [(doc, 0) for doc in FOLLOW_UPS] + [(doc, 1) for doc in FOLLOW_UPS]
    for i, (doc, turn) in enumerate(order):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            if turn == 0:
                messages = task_messages(documents, first[doc])
            else:
                messages = chats[(name, doc)] + [{"role": "user", "content": FOLLOW_UPS[doc]}]
            timing = configs[name].run(f"{doc}-turn{turn + 1}", tokenize_chat(messages), max_tokens)
            chats[(name, doc)] = messages + [{"role": "assistant", "content": timing.text}]
            results[name].append(timing)
            progress(_line(name, timing))
    return results


def run_disk(
    path: Path,
    tokenize_chat: Callable[[list[dict[str, str]]], list[int]],
    folder: Path,
    *,
    n_ctx: int,
    n_threads: int,
    progress: Callable[[str], None] = print,
) -> dict[str, list[Timing]]:
    """ "cold" and "restarted": the second question on a document from an empty cache, and
    from the disk tier a first model wrote (plain decoding, 16 tokens)."""
    from river_cpp import RiverModel

    documents, tasks = load_set()
    first, second = [t for t in tasks if t.document == "fnmatch" and t.kind in ("question", "quote")][:2]
    results: dict[str, list[Timing]] = {"cold": [], "restarted": []}
    with RiverModel(str(path), n_ctx=n_ctx, n_threads=n_threads, prompt_cache=folder) as model:
        model.generate(tokenize_chat(task_messages(documents, first)), max_tokens=16, speculative=False)
    ids = tokenize_chat(task_messages(documents, second))
    with RiverModel(str(path), n_ctx=n_ctx, n_threads=n_threads) as model:
        results["cold"].append(OurConfig("cold", model, speculative=False).run(second.name, ids, 16))
    with RiverModel(str(path), n_ctx=n_ctx, n_threads=n_threads, prompt_cache=folder) as model:
        results["restarted"].append(OurConfig("restarted", model, speculative=False).run(second.name, ids, 16))
    for name, timings in results.items():
        progress(_line(name, timings[0]))
    return results


def _line(name: str, t: Timing) -> str:
    return (
        f"{t.request:18s} {name:10s} prompt {t.prompt_tokens:5d}  ttft {t.ttft:6.2f} s  "
        f"whole {t.seconds:6.2f} s  {t.tokens:4d} tokens  decode {t.decode_tokens_per_second:6.2f} t/s"
    )


# ---------------------------------------------------------------- report


def summary(results: dict[str, list[Timing]], references: Sequence[str] = ("llama", "plain")) -> list[dict[str, Any]]:
    """One row per configuration: summed ttft and whole-request seconds, decode tokens/s
    (all decode tokens over all decode time); against each of `references` run on the
    same requests, the whole-request speed-up (the sum of its seconds over the sum of
    this row's) and the worst single request's; for `default`, how many requests gave
    plain's tokens."""
    rows = []
    for name, timings in results.items():
        decode_tokens = sum(max(t.tokens - 1, 0) for t in timings)
        decode_seconds = sum(t.seconds - t.ttft for t in timings)
        row: dict[str, Any] = {
            "config": name,
            "requests": len(timings),
            "ttft_s": sum(t.ttft for t in timings),
            "whole_s": sum(t.seconds for t in timings),
            "decode_tokens_per_s": decode_tokens / decode_seconds if decode_seconds > 0 else 0.0,
            "per_request": [
                {"request": t.request, "ttft_s": t.ttft, "whole_s": t.seconds, "tokens": t.tokens} for t in timings
            ],
        }
        for reference in references:
            base = results.get(reference)
            if base is None or reference == name:
                continue
            row["vs_" + reference] = sum(t.seconds for t in base) / row["whole_s"]
            row["worst_vs_" + reference] = min(b.seconds / t.seconds for b, t in zip(base, timings))
        if name == "default" and "plain" in results:
            row["identical_to_plain"] = sum(a.token_ids == b.token_ids for a, b in zip(timings, results["plain"]))
        rows.append(row)
    return rows


def table_lines(rows: Sequence[dict[str, Any]], references: Sequence[str] = ("llama", "plain")) -> list[str]:
    """The summary as a Markdown table (whole-request ratios: speed-up over the set, worst request)."""
    head = "".join(f" whole vs {r} | worst vs {r} |" for r in references)
    lines = [
        "| config | requests | ttft s | whole s | decode t/s |" + head,
        "|---|---:|---:|---:|---:|" + "---:|---:|" * len(references),
    ]
    for r in rows:
        ratios = "".join(
            f" {r['vs_' + ref]:.2f}x | {r['worst_vs_' + ref]:.2f}x |" if "vs_" + ref in r else " - | - |"
            for ref in references
        )
        lines.append(
            f"| {r['config']} | {r['requests']} | {r['ttft_s']:.1f} | {r['whole_s']:.1f} | "
            f"{r['decode_tokens_per_s']:.2f} |" + ratios
        )
    return lines
