"""Text <-> token ids, by llama.cpp's own tokenizer (llama-cpp-python, vocab-only).

Loading only the vocabulary keeps tokenization exactly llama.cpp's without a second
copy of the weights; the engine never sees text.
"""

from __future__ import annotations

from typing import Optional, Sequence

import llama_cpp


class Tokenizer:
    """The vocabulary of one GGUF file."""

    def __init__(self, model_path: str, *, verbose: bool = False) -> None:
        self._llama = llama_cpp.Llama(model_path, vocab_only=True, verbose=verbose)

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = False) -> list[int]:
        return self._llama.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.detokenize_bytes(ids).decode("utf-8", errors="replace")

    def detokenize_bytes(self, ids: Sequence[int]) -> bytes:
        """Bytes of `ids`; a multi-byte character may be split across tokens."""
        return self._llama.detokenize(list(ids))

    @property
    def eos_id(self) -> int:
        return self._llama.token_eos()

    def is_end_of_generation(self, token: int) -> bool:
        """True for end-of-sequence and end-of-turn tokens (e.g. <|im_end|>)."""
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    @property
    def chat_template(self) -> Optional[str]:
        return self._llama.metadata.get("tokenizer.chat_template")

    @property
    def _vocab(self):
        return llama_cpp.llama_model_get_vocab(self._llama._model.model)

    def close(self) -> None:
        self._llama.close()
