"""llama.cpp (through llama-cpp-python) as the reference runner of a GGUF file."""

from __future__ import annotations

import llama_cpp
import numpy as np


def llama_logits_and_greedy(path, ids, n_tokens):
    """llama.cpp's logits of every prompt position and its greedy continuation."""
    llm = llama_cpp.Llama(str(path), n_ctx=256, n_threads=2, logits_all=True, verbose=False)
    try:
        llm.eval(ids)
        logits = np.array(llm.scores[: len(ids)])
        tokens = []
        for _ in range(n_tokens):
            tokens.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
            llm.eval([tokens[-1]])
        return logits, tokens
    finally:
        llm.close()
