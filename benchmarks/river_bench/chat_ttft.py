"""Time to first token of a second chat turn, with the prompt cache and without it
(model.reset() before the turn); benchmarks/chat_ttft.py is its command line.
"""

from __future__ import annotations

import time
from typing import Callable

from river_cpp.model import RiverModel

SYSTEM = (
    "You are a patient geography tutor. You answer in plain language, give one concrete example "
    "for every claim, and keep each answer short. When a question is ambiguous you say which "
    "reading you chose. You know rivers, lakes, deltas, estuaries, watersheds and floods well, "
    "and you like to mention how people have lived along rivers through history."
)
FIRST = "What is the difference between a river delta and an estuary? Give an example of each."
SECOND = "Which of the two is the Thames, and why?"


def ttft(model: RiverModel, messages: list[dict], **options) -> tuple[float, int, int]:
    """(seconds to the first chunk with text, prompt tokens, cached tokens) of one streamed turn."""
    start = time.perf_counter()
    chunks = model.create_chat_completion(
        messages, stream=True, stream_options={"include_usage": True}, max_tokens=32, temperature=0, **options
    )
    first = None
    usage = None
    for chunk in chunks:
        if first is None and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
            first = time.perf_counter() - start
        usage = chunk.get("usage") or usage
    return first, usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


def cached_and_cold(
    model: RiverModel, repetitions: int, progress: Callable[[str], None] = print, **options
) -> dict[str, list[float]]:
    """ "cached"/"cold" -> seconds to the first token of the second turn, per
    repetition, the two interleaved. Either way the cache first holds the first turn,
    as after answering it; "cold" then resets the model. `options`: of
    create_chat_completion (speculative=...)."""
    first_turn = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": FIRST}]
    answer = model.create_chat_completion(first_turn, max_tokens=64, temperature=0, **options)
    second_turn = first_turn + [answer["choices"][0]["message"], {"role": "user", "content": SECOND}]
    results: dict[str, list[float]] = {"cached": [], "cold": []}
    for _ in range(repetitions):
        for mode in ("cold", "cached"):
            model.reset()
            model.create_chat_completion(first_turn, max_tokens=64, temperature=0, **options)
            if mode == "cold":
                model.reset()
            seconds, n_prompt, n_cached = ttft(model, second_turn, **options)
            results[mode].append(seconds)
            progress(f"{mode:6s} ttft {1000 * seconds:7.1f} ms  prompt {n_prompt} tokens, {n_cached} cached")
    return results
