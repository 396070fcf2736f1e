"""llama.cpp (through llama-cpp-python) as the reference runner of a GGUF file."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from river_cpp.measure.llama_peer import load_llama


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


def llama_run(path, ids, n_tokens) -> LlamaRun:
    llm = load_llama(path, n_ctx=256, n_threads=2, logits_all=True, verbose=False)
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


def llama_logits_and_greedy(path, ids, n_tokens):
    """llama.cpp's logits of every prompt position and its greedy continuation."""
    run = llama_run(path, ids, n_tokens)
    return run.logits, run.greedy
