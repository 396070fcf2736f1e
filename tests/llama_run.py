"""llama.cpp (through llama-cpp-python) as the reference runner of a GGUF file, on the
CPU alone (in this process) or on the tests' Vulkan device (in a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np

from river_cpp.engine.compute.llama_backbone import load_llama


@dataclass
class LlamaRun:
    """llama.cpp's logits of every prompt position and its greedy continuation."""

    logits: np.ndarray  # [n_prompt, n_vocab]
    greedy: list[int]
    decode_logits: np.ndarray  # [n_tokens, n_vocab]: row i chose greedy[i]

    def decided(self, noise: float) -> np.ndarray:
        """Which greedy choices lead the runner-up by more than `noise` logits."""
        top2 = np.sort(self.decode_logits, axis=-1)[:, -2:]
        return top2[:, 1] - top2[:, 0] > noise

    def decode_along(self, model, prompt_logits: np.ndarray) -> np.ndarray:
        """Our logits at llama.cpp's decode steps: the prompt's last row, then one
        single-token forward of `model` (just past the prompt) per greedy token."""
        steps = [model.forward([t], last_only=True)[0] for t in self.greedy[:-1]]
        return np.stack([prompt_logits[-1]] + steps)

    def assert_decode_matches(self, decode: np.ndarray, tolerance: float, min_decided: int) -> None:
        """Our decode logits lie within `tolerance` of llama.cpp's, and pick its token
        wherever that choice is not a near tie (at least `min_decided` such steps)."""
        assert np.abs(decode - self.decode_logits).max() < tolerance
        decided = self.decided(noise=tolerance)
        assert decided.sum() >= min_decided
        assert (decode.argmax(-1) == self.greedy)[decided].all()


def cpu_llama(path, **options) -> llama_cpp.Llama:
    """llama_cpp.Llama(path, **options) computing on the CPU alone (load_llama's cpu_only):
    without a device list llama.cpp takes every device ggml registered in this process
    (the tests' Vulkan device, RPC servers) even at n_gpu_layers=0."""
    return load_llama(path, cpu_only=True, **options)


def llama_run(path, ids, n_tokens, device: str = "CPU") -> LlamaRun:
    """llama.cpp's run of `path` on `ids` and `n_tokens` greedy tokens, on the CPU or,
    with device="Vulkan0", all layers on the Vulkan device."""
    if device == "Vulkan0":
        return _vulkan_run(path, ids, n_tokens)
    if device != "CPU":
        raise ValueError(f"llama_run runs on the CPU or Vulkan0, not {device!r}")
    return _run(cpu_llama(path, n_ctx=256, n_threads=2, logits_all=True, verbose=False), ids, n_tokens)


def _vulkan_run(path, ids, n_tokens) -> LlamaRun:
    """In a subprocess, which registers only the Vulkan device (lavapipe, made visible as
    tests/conftest.py explains) and no RPC server: llama.cpp offloads to every device
    it sees, and cannot be pointed at one through llama-cpp-python."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "run.npz"
        script = (
            "import sys, numpy as np, llama_cpp\n"
            "from llama_run import _run\n"
            "options = dict(n_ctx=256, n_threads=2, n_gpu_layers=-1, logits_all=True, verbose=False)\n"
            "llm = llama_cpp.Llama(sys.argv[1], **options)\n"
            "run = _run(llm, [int(i) for i in sys.argv[3].split(',')], int(sys.argv[4]))\n"
            "np.savez(sys.argv[2], logits=run.logits, greedy=run.greedy, decode_logits=run.decode_logits)\n"
        )
        env = {**os.environ, "GGML_VK_VISIBLE_DEVICES": "0", "PYTHONPATH": str(Path(__file__).parent)}
        command = [sys.executable, "-c", script, str(path), str(out), ",".join(map(str, ids)), str(n_tokens)]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"llama.cpp on Vulkan0 failed: {done.stderr[-2000:]}")
        saved = np.load(out)
        return LlamaRun(saved["logits"], [int(t) for t in saved["greedy"]], saved["decode_logits"])


def _run(llm: llama_cpp.Llama, ids, n_tokens) -> LlamaRun:
    try:
        llm.eval(ids)
        logits = np.array(llm.scores[: len(ids)])
        tokens, rows = [], []
        for _ in range(n_tokens):
            rows.append(np.array(llm.scores[llm.n_tokens - 1]))
            tokens.append(int(np.argmax(rows[-1])))
            llm.eval([tokens[-1]])
        return LlamaRun(logits, tokens, np.stack(rows))
    finally:
        llm.close()


def llama_cpp_greedy(path, prompt_ids, n_tokens) -> list[int]:
    """llama.cpp's own greedy loop (llama-cpp-python's Llama.generate) on the CPU: the
    first `n_tokens` tokens it generates after `prompt_ids`."""
    llm = cpu_llama(path, n_ctx=512, n_threads=2, n_batch=512, verbose=False)
    try:
        out = []
        for token in llm.generate(prompt_ids, top_k=1, temp=0.0, repeat_penalty=1.0):
            out.append(int(token))
            if len(out) == n_tokens:
                break
        return out
    finally:
        llm.close()


def llama_logits_and_greedy(path, ids, n_tokens):
    """llama.cpp's logits of every prompt position and its greedy continuation."""
    run = llama_run(path, ids, n_tokens)
    return run.logits, run.greedy
