"""Plain decode speed under each OpenMP wait policy, idle and beside busy processes
(benchmarks/wait_policy.py is its command line): what river_cpp._cpus.DEFAULT_WAIT
costs on an idle machine and what it keeps under load.

Each measurement is a fresh Python process (an OpenMP runtime reads its wait settings
once, when it loads), running our plain decoding with the given threads (fixed, or with its ThreadGovernor
in the "river-cpp default" row), or
llama-cpp-python alone with its own default threads (it does not import river_cpp, so
it runs under the runtime's defaults, as in a user's own process). "Loaded" runs
start `busy` processes that spin on the CPU first, and end them after. Policies and
loads alternate within each repetition.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Callable, Mapping, Optional, Sequence

from river_cpp._cpus import DEFAULT_WAIT, OPENMP_WAIT_VARIABLES

# name -> the environment a run gets (every OPENMP_WAIT_VARIABLES not named is unset)
POLICIES: dict[str, dict[str, str]] = {
    "runtime-default": {"GOMP_SPINCOUNT": "300000"},  # libgomp's own default when nothing is set
    "river-cpp": dict(DEFAULT_WAIT),
    "spin-1000": {"GOMP_SPINCOUNT": "1000", "KMP_BLOCKTIME": "0"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
}
PROMPT = "Write a long, detailed story about a river that flows through a city, in many paragraphs."

_OURS = """
import json, sys
import river_cpp
from river_cpp import RiverModel
path, n_threads, n_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
adapt = sys.argv[5] == "adapt"
with RiverModel(path, n_threads=n_threads, n_ctx=1024, river=None, progress=False, adapt_threads=adapt) as model:
    prompt = model.tokenizer.apply_chat_template([{"role": "user", "content": sys.argv[4]}])
    model.generate(prompt, max_tokens=4, speculative=False)
    result = model.generate(prompt, max_tokens=n_tokens, speculative=False)
print(json.dumps({"tokens_per_s": result.generation_tokens_per_second, "n_threads": n_threads}))
"""

_LLAMA = """
import json, sys, time
import llama_cpp
path, n_tokens = sys.argv[1], int(sys.argv[3])
llama = llama_cpp.Llama(path, n_ctx=1024, verbose=False)
prompt = "<|im_start|>user\\n" + sys.argv[4] + "<|im_end|>\\n<|im_start|>assistant\\n"
llama.create_completion(prompt, max_tokens=4, temperature=0.0)
llama.reset()
chunks = llama.create_completion(prompt, max_tokens=n_tokens, temperature=0.0, stream=True)
times = [time.perf_counter() for _ in chunks]
rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
print(json.dumps({"tokens_per_s": rate, "n_threads": llama.context_params.n_threads}))
"""


def run_once(
    model: str,
    policy: Mapping[str, str],
    *,
    engine: str,
    n_threads: int,
    n_tokens: int,
    busy: int,
    adapt: bool = False,
) -> dict[str, float]:
    """One fresh process's decode speed ({"tokens_per_s", "n_threads"}) under `policy`,
    beside `busy` spinning processes; `adapt`: ours with its ThreadGovernor."""
    env = {k: v for k, v in os.environ.items() if k not in OPENMP_WAIT_VARIABLES}
    env.update(policy)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        time.sleep(0.5 if busy else 0.0)
        code = _OURS if engine == "river-cpp" else _LLAMA
        done = subprocess.run(
            [sys.executable, "-c", code, model, str(n_threads), str(n_tokens), PROMPT, "adapt" if adapt else "fixed"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(
    model: str,
    *,
    n_threads: int,
    n_tokens: int = 64,
    repetitions: int = 3,
    busy: int = 1,
    policies: Optional[Sequence[str]] = None,
    llama_peer: bool = True,
    progress: Callable[[str], None] = print,
) -> dict[str, dict[str, list[float]]]:
    """row -> {"idle": [tokens/s ...], "loaded": [...]}: a row per policy of ours at a
    fixed thread count, "river-cpp default" (its policy and its ThreadGovernor), and
    "llama-cpp-python default" (its default threads, the runtime's default policy)."""
    rows = [(name, "river-cpp", POLICIES[name], False) for name in (policies or list(POLICIES))]
    rows.append(("river-cpp default", "river-cpp", POLICIES["river-cpp"], True))
    if llama_peer:
        rows.append(("llama-cpp-python default", "llama", {}, False))
    results: dict[str, dict[str, list[float]]] = {name: {"idle": [], "loaded": []} for name, *_ in rows}
    for _ in range(repetitions):
        for load, n_busy in (("idle", 0), ("loaded", busy)):
            for name, engine, policy, adapt in rows:
                out = run_once(
                    model, policy, engine=engine, n_threads=n_threads, n_tokens=n_tokens, busy=n_busy, adapt=adapt
                )
                results[name][load].append(out["tokens_per_s"])
                progress(f"{name:26s} {load:6s} {out['n_threads']} threads  {out['tokens_per_s']:6.2f} tokens/s")
    return results
