"""Our vocab-only tokenizer equals llama-cpp-python's Llama on the same GGUF."""

from __future__ import annotations

import llama_cpp
import pytest

from river_cpp.engine.compute.tokenizer import Tokenizer

pytestmark = pytest.mark.real_model  # the demo model's tokenizer

TEXTS = ["Hello world", "naïve café — 3.14 €", "<|im_start|>user\nhi<|im_end|>\n", "  leading spaces\n\ttabs"]


@pytest.mark.parametrize("special", [False, True])
def test_matches_llama_cpp_python(demo_model, special):
    ours = Tokenizer(str(demo_model))
    theirs = llama_cpp.Llama(str(demo_model), vocab_only=True, verbose=False)
    for text in TEXTS:
        ids = ours.tokenize(text, special=special)
        assert ids == theirs.tokenize(text.encode(), special=special)
        assert ours.detokenize_bytes(ids) == theirs.detokenize(ids)
    assert ours.is_end_of_generation(ours.eos_id)
    assert "im_start" in (ours.chat_template or "")
    ours.close()
    ours.close()


def test_chat_template_renders_a_conversation(demo_model):
    tokenizer = Tokenizer(str(demo_model))
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi there"}])
    assert text == "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    tokenizer.close()
