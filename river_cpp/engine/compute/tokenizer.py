"""Text <-> token ids, by llama.cpp's own tokenizer (llama-cpp-python's C API).

Only the vocabulary of the GGUF is loaded (no weights, no llama.cpp context), so
tokenization is exactly llama.cpp's without a second copy of the model; the engine
never sees text. The vocabulary is checked first (_core.check_vocabulary): llama.cpp
aborts the process on some broken ones.
"""

from __future__ import annotations

import ctypes
from typing import Mapping, Optional, Sequence, Union

import llama_cpp

from river_cpp.engine import _core


class Tokenizer:
    """The vocabulary of one GGUF file."""

    def __init__(self, model_path: str) -> None:
        """Load the vocabulary of the GGUF at model_path; RiverError for one that
        llama.cpp could not load or tokenize with safely."""
        _core.check_vocabulary(model_path)
        self._load(model_path)

    def _load(self, model_path: str) -> None:
        """llama.cpp's vocabulary-only load, unchecked (scripts/fuzz_gguf.py calls it
        to find what the check must catch)."""
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        # An empty device list (NULL-terminated): a vocabulary needs no device, and by
        # default llama.cpp's loader asks every device in the process for its memory,
        # RPC servers included, and ggml aborts on one that went away.
        no_devices = (ctypes.c_void_p * 1)(None)
        params.devices = ctypes.addressof(no_devices)
        self._model = llama_cpp.llama_model_load_from_file(model_path.encode("utf-8"), params)
        if not self._model:
            raise ValueError(f"llama.cpp could not load the vocabulary of {model_path}")
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))

    def tokenize(self, text: Union[str, bytes], *, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of `text` (str, or UTF-8 bytes); add_bos adds the model's BOS only
        if its metadata asks for it."""
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        capacity = len(data) + 8
        while True:
            ids = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), ids, capacity, add_bos, special)
            if n >= 0:
                return list(ids[:n])
            capacity = -n

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.detokenize_bytes(ids).decode("utf-8", errors="replace")

    def detokenize_bytes(self, ids: Sequence[int], *, special: bool = False) -> bytes:
        """Bytes of `ids` (special tokens render as nothing unless `special`); a
        multi-byte character may be split across tokens."""
        return b"".join(self._piece(int(t), special) for t in ids)

    def _piece(self, token: int, special: bool = False) -> bytes:
        # llama.cpp throws through its C API (an abort) for an id outside the vocabulary
        if not 0 <= token < self.n_vocab:
            raise ValueError(f"token id {token} is outside the vocabulary [0, {self.n_vocab})")
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    @property
    def vocab(self):
        """llama.cpp's vocabulary pointer (for its grammar sampler); valid until close()."""
        return self._vocab

    @property
    def eos_id(self) -> int:
        return llama_cpp.llama_vocab_eos(self._vocab)

    @property
    def bos_id(self) -> int:
        """The beginning-of-sequence token (-1: the vocabulary has none)."""
        return llama_cpp.llama_vocab_bos(self._vocab)

    @property
    def nl_id(self) -> int:
        """The newline token."""
        return llama_cpp.llama_vocab_nl(self._vocab)

    def is_end_of_generation(self, token: int) -> bool:
        """True for end-of-sequence and end-of-turn tokens (e.g. <|im_end|>)."""
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    @property
    def chat_template(self) -> Optional[str]:
        template = llama_cpp.llama_model_chat_template(self._model, None)
        return template.decode("utf-8") if template else None

    def apply_chat_template(self, messages: Sequence[Mapping[str, str]], *, add_assistant: bool = True) -> str:
        """The conversation as prompt text, in the model's chat template (llama.cpp's
        built-in renderer of the templates it knows), ready for generation."""
        template = llama_cpp.llama_model_chat_template(self._model, None)
        if not template:
            raise ValueError("this model has no chat template (tokenizer.chat_template)")
        keep = [(m["role"].encode("utf-8"), m["content"].encode("utf-8")) for m in messages]
        chat = (llama_cpp.llama_chat_message * len(keep))(*[llama_cpp.llama_chat_message(r, c) for r, c in keep])
        size = 2 * sum(len(r) + len(c) for r, c in keep) + 256
        while True:
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_chat_apply_template(template, chat, len(keep), add_assistant, buf, size)
            if n < 0:
                raise ValueError("llama.cpp does not know this model's chat template")
            if n <= size:
                return buf.raw[:n].decode("utf-8")
            size = n

    def close(self) -> None:
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None
