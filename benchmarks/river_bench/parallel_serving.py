"""Several clients on one server: river-cpp's slots against one request at a time and
against llama-cpp-python's server, on the same file (benchmarks/parallel_serving.py
is its command line).

Every server runs as its own process on a free port, all of them at once, and they
take turns: each round runs every workload on every server, one server at a time, so
the noise of the machine falls on all alike.

- throughput: `clients` threads each send `requests` chat prompts in turn (streamed,
  `max_tokens` each, greedy and seeded by turns); aggregate completion tokens per
  second of wall time, and each answer's text, to compare with one at a time.
- waiting: a long answer (`long_tokens`) streams; once it has run a while, a short
  request (a prompt of about 40 tokens, 16 tokens out) arrives. Its time to first
  token, against the same request on the idle server first, and the long stream's
  tokens per second while the two share, against before the short one arrived.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

SHORT_PROMPT = "In one short sentence: what is a river delta, and which famous one lies in Egypt?"
LONG_PROMPT = "Write a long, detailed story about a river that flows through a city, in many paragraphs."


def chat_prompts(n: int) -> list[str]:
    """The first n prompts of the package's chat prompt set."""
    import river_cpp

    text = (Path(river_cpp.__file__).parent / "data" / "chat_prompts.txt").read_text()
    prompts = [p.strip() for p in text.split("\n---\n") if p.strip()]
    return [prompts[i % len(prompts)] for i in range(n)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """A server process and where it answers."""

    name: str
    command: list[str]
    health: str  # a GET path that answers 200 once the model is loaded
    port: int = field(default_factory=free_port)
    process: Optional[subprocess.Popen] = None

    def start(self, log_folder: Path) -> None:
        log = open(log_folder / f"{self.name.replace(' ', '_')}.log", "wb")
        self.process = subprocess.Popen(self.command + ["--port", str(self.port)], stdout=log, stderr=log)

    def wait_ready(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode} (see its log)")
            try:
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                connection.request("GET", self.health)
                if connection.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(1)
        raise TimeoutError(f"{self.name} did not become ready in {timeout} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def river_server(model: str, threads: int, parallel: int, n_ctx: int) -> Server:
    code = "import sys; from river_cpp.apps.cli import main; sys.exit(main(sys.argv[1:]))"
    command = [sys.executable, "-c", code, "serve", "--model", model, "--threads", str(threads)]
    command += ["--n-ctx", str(n_ctx), "--parallel", str(parallel), "--queue", "16"]
    return Server(f"river-cpp --parallel {parallel}", command, "/health")


def llama_server(python: str, model: str, threads: int, n_ctx: int) -> Server:
    command = [python, "-m", "llama_cpp.server", "--model", model, "--n_threads", str(threads)]
    command += ["--n_threads_batch", str(threads), "--n_ctx", str(n_ctx), "--host", "127.0.0.1"]
    command += ["--interrupt_requests", "False"]  # its default cuts a running stream off for a new request
    return Server("llama-cpp-python server", command, "/v1/models")


@dataclass
class Streamed:
    """One streamed chat completion, timed on the client."""

    sent: float
    token_times: list[float] = field(default_factory=list)  # each content chunk's arrival
    text: str = ""

    @property
    def ttft(self) -> float:
        return self.token_times[0] - self.sent


def stream_chat(
    port: int,
    prompt: str,
    max_tokens: int,
    on_token: Optional[Callable[[], None]] = None,
    seed: Optional[int] = None,
) -> Streamed:
    """POST a streamed chat completion, greedy (or sampled at temperature 0.8 with
    `seed`); the arrival time of each chunk with text, and the text."""
    sampling = {"temperature": 0} if seed is None else {"temperature": 0.8, "seed": seed}
    body = json.dumps(
        {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "stream": True, **sampling}
    )
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    record = Streamed(time.perf_counter())
    connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:200]!r}")
    for raw in response:
        line = raw.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[5:])
        for choice in chunk.get("choices", []):
            if choice.get("delta", {}).get("content"):
                record.token_times.append(time.perf_counter())
                record.text += choice["delta"]["content"]
                if on_token is not None:
                    on_token()
    connection.close()
    return record


def throughput(port: int, clients: int, requests: int, max_tokens: int) -> dict:
    """`clients` threads, `requests` prompts each in turn (odd ones seeded): chunks
    (about one per token) per second, and each prompt's answer."""
    prompts = chat_prompts(clients * requests)
    records: dict[int, Streamed] = {}
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            for r in range(requests):
                n = i * requests + r
                records[n] = stream_chat(port, prompts[n], max_tokens, seed=n if n % 2 else None)
        except BaseException as error:  # noqa: BLE001 - reported after the run
            errors.append(error)

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors:
        raise errors[0]
    tokens = sum(len(r.token_times) for r in records.values())
    texts = [records[n].text for n in sorted(records)]
    return {"seconds": wall, "tokens": tokens, "tokens_per_s": tokens / wall, "texts": texts}


def short_prompt() -> str:
    """The short request's prompt, new each time: a prompt the server cached would be
    answered without its prefill."""
    return f"Question {next(_short_prompts)}. {SHORT_PROMPT}"


_short_prompts = itertools.count()


def waiting(port: int, long_tokens: int, short_tokens: int, settle_s: float) -> dict:
    """The short request's time to first token alone and beside a long stream, and the
    long stream's rate before and while they share."""
    idle = stream_chat(port, short_prompt(), short_tokens)
    started = threading.Event()
    long_record: list[Streamed] = []

    def run_long() -> None:
        long_record.append(stream_chat(port, LONG_PROMPT, long_tokens, on_token=started.set))

    thread = threading.Thread(target=run_long)
    thread.start()
    started.wait(600)
    time.sleep(settle_s)  # the long stream runs alone for a while
    short = stream_chat(port, short_prompt(), short_tokens)
    thread.join()
    times = long_record[0].token_times

    def rate(first: float, last: float) -> Optional[float]:
        inside = [t for t in times if first <= t <= last]
        return (len(inside) - 1) / (inside[-1] - inside[0]) if len(inside) > 2 else None

    shared_end = short.token_times[-1]
    return {
        "short_ttft_idle_s": idle.ttft,
        "short_ttft_beside_long_s": short.ttft,
        "short_tokens": len(short.token_times),
        "long_tokens": len(times),
        "long_rate_alone": rate(times[0], short.sent),
        "long_rate_shared": rate(short.sent, shared_end),
    }


def run(
    model: str,
    *,
    threads: int,
    parallel: Sequence[int],
    llama_python: Optional[str],
    rounds: int,
    clients: int,
    requests: int,
    max_tokens: int,
    long_tokens: int,
    short_tokens: int,
    settle_s: float,
    n_ctx: int,
    log_folder: Path,
    progress: Callable[[str], None] = print,
) -> dict:
    """Start the servers, run `rounds` rounds of both workloads on each in turn; the
    per-server, per-round results."""
    servers = [river_server(model, threads, p, n_ctx) for p in parallel]
    if llama_python:
        servers.append(llama_server(llama_python, model, threads, n_ctx))
    log_folder.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, list]] = {s.name: {"throughput": [], "waiting": []} for s in servers}
    try:
        for server in servers:  # one at a time: loading is compute-bound
            server.start(log_folder)
            server.wait_ready()
        for server in servers:  # warm-up: graphs, the river's first timings
            stream_chat(server.port, SHORT_PROMPT, 16)
        for r in range(rounds):
            for server in servers:
                t = throughput(server.port, clients, requests, max_tokens)
                results[server.name]["throughput"].append(t)
                progress(f"round {r} {server.name:<26} throughput {t['tokens_per_s']:6.2f} tokens/s")
                w = waiting(server.port, long_tokens, short_tokens, settle_s)
                results[server.name]["waiting"].append(w)
                progress(
                    f"round {r} {server.name:<26} short ttft idle {w['short_ttft_idle_s']:.2f} s, beside a long "
                    f"stream {w['short_ttft_beside_long_s']:.2f} s; long stream {w['long_rate_alone'] or 0:.2f} -> "
                    f"{w['long_rate_shared'] or 0:.2f} tokens/s"
                )
    finally:
        for server in servers:
            server.stop()
    return {"model": os.path.basename(model), "threads": threads, "results": results}


def _median(values: Sequence[Optional[float]]) -> Optional[float]:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def summarize(results: dict, one_at_a_time: str, control: Optional[str]) -> dict:
    """Per server, the medians over rounds, and the goals' ratios: aggregate tokens/s
    against `one_at_a_time` and against `control`; the short request's time to first
    token beside a long stream against idle; the long stream's rate while they share
    against before."""
    per_server = {}
    for name, runs in results.items():
        waits = runs["waiting"]
        per_server[name] = {
            "tokens_per_s": _median([t["tokens_per_s"] for t in runs["throughput"]]),
            "short_ttft_idle_s": _median([w["short_ttft_idle_s"] for w in waits]),
            "short_ttft_beside_long_s": _median([w["short_ttft_beside_long_s"] for w in waits]),
            "long_rate_alone": _median([w["long_rate_alone"] for w in waits]),
            "long_rate_shared": _median([w["long_rate_shared"] for w in waits]),
        }
    reference = results[one_at_a_time]["throughput"]
    for name, s in per_server.items():
        if name.startswith("river-cpp"):  # the same answers as one at a time (llama.cpp's sampler is another)
            pairs = [
                (a, b)
                for run, ref in zip(results[name]["throughput"], reference)
                for a, b in zip(run["texts"], ref["texts"])
            ]
            s["identical"] = [sum(a == b for a, b in pairs), len(pairs)]
        s["vs_one_at_a_time"] = s["tokens_per_s"] / per_server[one_at_a_time]["tokens_per_s"]
        if control is not None:
            s["vs_control"] = s["tokens_per_s"] / per_server[control]["tokens_per_s"]
        s["ttft_ratio"] = s["short_ttft_beside_long_s"] / s["short_ttft_idle_s"]
        if s["long_rate_alone"] and s["long_rate_shared"]:
            s["long_rate_drop"] = 1 - s["long_rate_shared"] / s["long_rate_alone"]
    return per_server


def report(summary: dict) -> str:
    """The summary as a table."""
    lines = [
        f"{'server':<26} {'tokens/s':>9} {'vs 1-at-a-time':>15} {'vs control':>11} {'short ttft idle':>16} "
        f"{'beside long':>12} {'ratio':>6} {'long stream drop':>17} {'same answers':>13}"
    ]
    for name, s in summary.items():
        control = f"{s['vs_control']:.2f}x" if "vs_control" in s else "-"
        drop = f"{100 * s['long_rate_drop']:.0f}%" if "long_rate_drop" in s else "-"
        same = f"{s['identical'][0]}/{s['identical'][1]}" if "identical" in s else "-"
        lines.append(
            f"{name:<26} {s['tokens_per_s']:9.2f} {s['vs_one_at_a_time']:14.2f}x {control:>11} "
            f"{s['short_ttft_idle_s']:15.2f}s {s['short_ttft_beside_long_s']:11.2f}s {s['ttft_ratio']:5.1f}x "
            f"{drop:>17} {same:>13}"
        )
    return "\n".join(lines)
