"""Repeated work: decode speed where requests repeat one another, against plain decoding.

Three sets of requests, written for this benchmark (benchmarks/river_bench/data/repeated_work/):
- extraction: 12 orders pasted in turn, each to be answered with one JSON object of
  the same keys;
- edits: 8 edits across the files of one small Python project, which is also the
  corpus of the configuration that drafts from one;
- chat: a 6-turn chat about one module, whose later answers reuse earlier ones.

Each request is decoded greedily by every configuration, interleaved (the order
rotates from request to request), on the same model object:
- plain: plain decoding (speculative=False);
- context: the portfolio with drafts from the current context only (the default before
  the draft memory: Speculative(memory=False));
- memory: the default portfolio, which also drafts from the model's memory of the
  earlier requests of the run (and, on the edits, from the project as a corpus);
- lookup: llama-cpp-python's own loop with its LlamaPromptLookupDecoding draft, on
  the same file and threads (optional).
The lossless rows are checked token for token against plain decoding; the lookup
row's text against plain decoding's text. Speeds are decode speeds: tokens after
the first over the time from the first to the last, so that prompt processing,
which the prompt cache shares between configurations, is left out. The memory row's
indexing of the previous request happens before its first token and is timed apart
(`first_token_seconds`).

Timings on a shared machine are distorted by its other work: compare the ratios of
configurations in one run, never absolute speeds across runs.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from river_cpp.decoding.speculative_options import Speculative
from river_cpp.engine.decisions.round_cost import DEFAULT_MAX_DRAFT

DATA = Path(__file__).resolve().parent / "data" / "repeated_work"
SETS = ("extraction", "edits", "chat")
CONFIGS = ("plain", "context", "memory", "lookup")
# Most tokens generated per request of each set (an edited file is cut there: the
# speed of its first part is what is measured).
MAX_TOKENS = {"extraction": 160, "edits": 192, "chat": 192}


# ---------------------------------------------------------------- the requests


@dataclass
class Request:
    """One request of a set: its chat messages and how many tokens it may generate."""

    messages: list[dict[str, str]]
    max_tokens: int


def extraction_requests(max_tokens: int) -> list[Request]:
    data = json.loads((DATA / "extraction.json").read_text(encoding="utf-8"))
    return [
        Request([{"role": "user", "content": f"{data['instruction']}\n\nMessage:\n{text}"}], max_tokens)
        for text in data["texts"]
    ]


def project_folder() -> Path:
    """The small project the edits change (and the corpus of the memory row)."""
    return DATA / "project"


def edit_requests(max_tokens: int) -> list[Request]:
    data = json.loads((DATA / "edits.json").read_text(encoding="utf-8"))
    requests = []
    for edit in data["edits"]:
        content = (project_folder() / edit["path"]).read_text(encoding="utf-8")
        prompt = data["instruction"].format(path=edit["path"], content=content, task=edit["task"])
        requests.append(Request([{"role": "user", "content": prompt}], max_tokens))
    return requests


def chat_turns() -> tuple[str, list[str]]:
    data = json.loads((DATA / "chat.json").read_text(encoding="utf-8"))
    return data["system"], data["turns"]


# ---------------------------------------------------------------- running


@dataclass
class Run:
    """One configuration's decode of one request."""

    tokens: int  # generated after the first
    seconds: float  # from the first token to the last
    first_token_seconds: float  # from the call to its first token
    identical: Optional[bool]  # to plain decoding (None: plain itself)
    text: str = ""
    by_source: dict[str, tuple[int, int]] = field(default_factory=dict)  # drafted, accepted
    index: str = ""  # the speculative summary's index sizes
    tokens_per_verify: float = 0.0  # of a lossless row: tokens per backbone forward
    near_tie: Optional[float] = None  # where it differs from plain: the backbone's top-2 gap there (of its scale)

    @property
    def speed(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def _decode_ours(model, prompt: str, max_tokens: int, speculative: Any) -> tuple[Run, list[int]]:
    began = time.perf_counter()
    first = last = None
    stream = model.generate(prompt, max_tokens=max_tokens, temperature=0.0, speculative=speculative, stream=True)
    for _ in stream:
        last = time.perf_counter()
        first = first or last
    result = stream.result
    stats = result.speculative
    by_source = {name: (s.drafted, s.accepted) for name, s in stats.by_source.items()} if stats else {}
    index = stats.summary().split("; ")[-1] if stats and (stats.memory_capacity or stats.corpus_tokens) else ""
    run = Run(
        tokens=max(len(result.token_ids) - 1, 0),
        seconds=(last - first) if first else 0.0,
        first_token_seconds=(first - began) if first else 0.0,
        identical=None,
        text=result.text,
        by_source=by_source,
        index=index,
        tokens_per_verify=stats.tokens_per_round if stats else 0.0,
    )
    return run, list(result.token_ids)


def top2_gap(model, prompt: str, reference: Sequence[int], tokens: Sequence[int]) -> float:
    """The backbone's top-2 logit gap, relative to its logit scale, where `tokens`
    first leaves `reference`: batched and single-token forwards may order a near-tie
    apart, and a lossless run then goes on from the other token."""
    import numpy as np

    i = next((i for i, (a, b) in enumerate(zip(reference, tokens)) if a != b), min(len(reference), len(tokens)))
    ids = model.tokenize(prompt, add_bos=True, special=True) + list(reference[:i])
    model.reset()
    logits = model.forward(ids, last_only=True, route="backbone")[0]
    top2 = np.sort(logits)[-2:]
    return float(top2[1] - top2[0]) / float(np.abs(logits).max())


class PromptLookup:
    """llama-cpp-python's loop with LlamaPromptLookupDecoding on the same GGUF."""

    def __init__(self, path: Path, n_ctx: int, n_threads: int, max_draft: int = DEFAULT_MAX_DRAFT) -> None:
        from river_cpp.measure.llama_peer import load_prompt_lookup

        self.llama = load_prompt_lookup(path, n_ctx=n_ctx, n_threads=n_threads, max_draft=max_draft, cpu_only=True)

    def decode(self, prompt: str, max_tokens: int) -> Run:
        began = time.perf_counter()
        first = last = None
        count = 0
        pieces = []
        for chunk in self.llama.create_completion(prompt, max_tokens=max_tokens, temperature=0.0, stream=True):
            last = time.perf_counter()
            first = first or last
            count += 1
            pieces.append(chunk["choices"][0]["text"])
        return Run(
            tokens=max(count - 1, 0),
            seconds=(last - first) if first else 0.0,
            first_token_seconds=(first - began) if first else 0.0,
            identical=None,
            text="".join(pieces),
        )

    def close(self) -> None:
        self.llama.close()


@dataclass
class SetResult:
    """Every configuration's runs of one set, request by request."""

    name: str
    runs: dict[str, list[Run]] = field(default_factory=dict)

    def mean_ratio(self, config: str) -> float:
        """The mean over requests of the configuration's speed over plain decoding's."""
        ratios = [run.speed / plain.speed for run, plain in zip(self.runs[config], self.runs["plain"]) if plain.speed]
        return statistics.fmean(ratios) if ratios else 0.0

    def total_ratio(self, config: str) -> float:
        """The set's speed (all its tokens over all its decode time) over plain decoding's."""

        def speed(runs: list[Run]) -> float:
            seconds = sum(r.seconds for r in runs)
            return sum(r.tokens for r in runs) / seconds if seconds else 0.0

        plain = speed(self.runs["plain"])
        return speed(self.runs[config]) / plain if plain else 0.0

    def identical(self, config: str) -> tuple[int, int]:
        runs = self.runs[config]
        return sum(1 for r in runs if r.identical), len(runs)

    def drafted_by_kind(self, config: str) -> dict[str, tuple[int, int]]:
        """Drafted and accepted tokens per kind of source (ngram, memory, corpus, river, copy)."""
        kinds: dict[str, list[int]] = {}
        for run in self.runs[config]:
            for name, (drafted, accepted) in run.by_source.items():
                kind = name.rstrip("0123456789")
                if drafted:
                    totals = kinds.setdefault(kind, [0, 0])
                    totals[0] += drafted
                    totals[1] += accepted
        return {kind: (d, a) for kind, (d, a) in sorted(kinds.items())}


def run_set(
    name: str,
    requests: Sequence[Request] | Callable[[list[str]], Optional[Request]],
    model,
    configs: dict[str, Any],
    lookup: Optional[PromptLookup],
    progress: Callable[[str], None] = lambda line: None,
) -> SetResult:
    """Run every configuration on each request in turn, the order rotating. `requests`
    is a list, or (for a chat) a function of the answers so far giving the next
    request (None: the end); the chat goes on with plain decoding's answers."""
    names = [*configs, *(["lookup"] if lookup is not None else [])]
    result = SetResult(name, {config: [] for config in names})
    answers: list[str] = []
    i = 0
    while True:
        if callable(requests):
            request = requests(answers)
        else:
            request = requests[i] if i < len(requests) else None
        if request is None:
            return result
        prompt = model.tokenizer.apply_chat_template(request.messages)
        order = names[i % len(names) :] + names[: i % len(names)]
        ours: dict[str, tuple[Run, list[int]]] = {}
        for config in order:
            if config == "lookup":
                run = lookup.decode(prompt, request.max_tokens)
            else:
                ours[config] = _decode_ours(model, prompt, request.max_tokens, configs[config])
                run = ours[config][0]
            result.runs[config].append(run)
        plain_run, plain_ids = ours["plain"]
        for config in names:
            run = result.runs[config][-1]
            if config == "lookup":
                run.identical = run.text == plain_run.text
            elif config != "plain":
                run.identical = ours[config][1] == plain_ids
                if not run.identical:
                    run.near_tie = top2_gap(model, prompt, plain_ids, ours[config][1])
        answers.append(plain_run.text)
        speeds = ", ".join(f"{c} {result.runs[c][-1].speed:.2f}" for c in names)
        same = ", ".join(f"{c} {'yes' if result.runs[c][-1].identical else 'NO'}" for c in names if c != "plain")
        progress(f"{name} {i + 1}: {plain_run.tokens + 1} tokens; tokens/s {speeds}; identical: {same}")
        i += 1


def chat_requests(max_tokens: int) -> Callable[[list[str]], Optional[Request]]:
    system, turns = chat_turns()

    def next_request(answers: list[str]) -> Optional[Request]:
        if len(answers) >= len(turns):
            return None
        messages = [{"role": "system", "content": system}]
        for question, answer in zip(turns, answers):
            messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        messages.append({"role": "user", "content": turns[len(answers)]})
        return Request(messages, max_tokens)

    return next_request


def measure_repeated_work(
    model,
    *,
    sets: Sequence[str] = SETS,
    max_tokens: Optional[dict[str, int]] = None,
    lookup: Optional[PromptLookup] = None,
    max_draft: int = DEFAULT_MAX_DRAFT,
    progress: Callable[[str], None] = lambda line: None,
) -> list[SetResult]:
    """Run the repeated-work sets on `model` (a RiverModel). Each set starts with an
    empty draft memory: the model's memory holds only that set's earlier requests
    (Speculative(memory_tokens) is left at its default)."""
    from river_cpp.decoding.draft_memory import forget_memory_of

    unknown = set(sets) - set(SETS)
    if unknown:
        raise ValueError(f"unknown sets: {', '.join(sorted(unknown))} (known: {', '.join(SETS)})")
    limits = {**MAX_TOKENS, **(max_tokens or {})}
    draft = "river+ngram" if model.has_river else "ngram"
    results = []
    for name in sets:
        forget_memory_of(model.backbone)  # a set's memory holds its own requests only (the loop runs on the backbone)
        corpus = (str(project_folder()),) if name == "edits" else ()
        configs = {
            "plain": False,
            "context": Speculative(draft=draft, max_draft=max_draft, memory=False),
            "memory": Speculative(draft=draft, max_draft=max_draft, corpus=corpus),
        }
        if name == "extraction":
            requests: Any = extraction_requests(limits[name])
        elif name == "edits":
            requests = edit_requests(limits[name])
        else:
            requests = chat_requests(limits[name])
        results.append(run_set(name, requests, model, configs, lookup, progress))
    return results


# ---------------------------------------------------------------- reporting


def results_table(results: Sequence[SetResult]) -> str:
    """A markdown table: per set and configuration, the mean of the per-request speed
    ratios to plain decoding, the set's overall ratio, identity, and what drafted."""
    lines = [
        "| set | configuration | speed vs plain (mean) | overall | tokens per verify | identical to plain "
        "| drafted (accepted) |",
        "|---|---|---|---|---|---|---|",
    ]
    for result in results:
        for config in result.runs:
            same, total = result.identical(config)
            identity = f"{same}/{total}" if config != "plain" else "-"
            gaps = [run.near_tie for run in result.runs[config] if run.near_tie is not None]
            if gaps:
                identity += " (top-2 gap " + ", ".join(f"{gap:.1e}" for gap in gaps) + " where not)"
            verify = [run.tokens_per_verify for run in result.runs[config] if run.tokens_per_verify]
            per_verify = f"{statistics.fmean(verify):.2f}" if verify else "-"
            kinds = ", ".join(
                f"{kind} {d} ({100 * a / d:.0f}%)" for kind, (d, a) in result.drafted_by_kind(config).items()
            )
            lines.append(
                f"| {result.name} | {config} | {result.mean_ratio(config):.2f}x | {result.total_ratio(config):.2f}x "
                f"| {per_verify} | {identity} | {kinds or '-'} |"
            )
    means = {
        config: statistics.fmean(r.mean_ratio(config) for r in results)
        for config in results[0].runs
        if all(config in r.runs for r in results)
    }
    if len(results) > 1:
        lines.append("")
        lines.append("Mean over the sets: " + ", ".join(f"{c} {v:.2f}x" for c, v in means.items()))
    return "\n".join(lines)


def results_json(results: Sequence[SetResult]) -> list[dict[str, Any]]:
    return [
        {
            "set": r.name,
            "configs": {
                config: {
                    "mean_ratio": r.mean_ratio(config),
                    "total_ratio": r.total_ratio(config),
                    "runs": [
                        {
                            "tokens": run.tokens,
                            "seconds": run.seconds,
                            "first_token_seconds": run.first_token_seconds,
                            "identical": run.identical,
                            "by_source": run.by_source,
                            "index": run.index,
                            "tokens_per_verify": run.tokens_per_verify,
                            "near_tie": run.near_tie,
                        }
                        for run in runs
                    ],
                }
                for config, runs in r.runs.items()
            },
        }
        for r in results
    ]
