"""Embeddings of a GGUF: llama.cpp's own context on the same file, in embedding mode.

river-cpp's engine computes next-token logits; an embedding is llama.cpp's pooled
hidden state (pooling as the GGUF says: mean, CLS, last or none), which llama.cpp
already computes exactly, for any architecture it knows (BERT-style embedding models
included). So embeddings run on a llama_cpp.Llama(embedding=True) opened on the same
file (memory-mapped, so its pages are shared with the generating model's): the
vectors are llama-cpp-python's own. This module owns that context and the OpenAI
embedding shapes; it does not generate.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Optional, Union

import llama_cpp
import llama_cpp.llama


class Embedder:
    """llama.cpp's embedding context of one GGUF, opened on first use and used by one
    thread at a time."""

    def __init__(
        self,
        model_path: Union[str, os.PathLike],
        *,
        n_ctx: int = 512,
        n_batch: int = 512,
        n_ubatch: int = 512,
        n_threads: Optional[int] = None,
        pooling_type: int = llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED,
        attention_type: int = llama_cpp.LLAMA_ATTENTION_TYPE_UNSPECIFIED,
        use_mmap: bool = True,
        n_gpu_layers: int = 0,
        verbose: bool = False,
    ) -> None:
        """The context's settings, as llama_cpp.Llama takes them (pooling_type -1: the GGUF's)."""
        self.model_path = os.fspath(model_path)
        self._options = dict(
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_ubatch=n_ubatch,
            n_threads=n_threads,
            pooling_type=pooling_type,
            attention_type=attention_type,
            use_mmap=use_mmap,
            n_gpu_layers=n_gpu_layers,
            verbose=verbose,
        )
        self._context: Optional[llama_cpp.llama.Llama] = None
        self._lock = threading.Lock()

    @property
    def context(self) -> llama_cpp.llama.Llama:
        """The llama_cpp.Llama in embedding mode (opened now if it is not yet)."""
        with self._lock:
            if self._context is None:
                # llama_cpp.llama.Llama: llama-cpp-python's class even under patch_llama_cpp()
                self._context = llama_cpp.llama.Llama(model_path=self.model_path, embedding=True, **self._options)
            return self._context

    def n_embd(self) -> int:
        return self.context.n_embd()

    def pooling_type(self) -> int:
        """llama.cpp's pooling of this context (the GGUF's unless pooling_type was given)."""
        return int(self.context.pooling_type())

    def embed(
        self, input: Union[str, list[str]], normalize: bool = False, truncate: bool = True, return_count: bool = False
    ) -> Any:
        """llama-cpp-python's Llama.embed: one vector per text (a list of token
        vectors each when the pooling is none); normalize: unit length."""
        _check_input(input)
        context = self.context
        with self._lock:
            return context.embed(input, normalize=normalize, truncate=truncate, return_count=return_count)

    def create_embedding(self, input: Union[str, list[str]], model: Optional[str] = None) -> dict[str, Any]:
        """OpenAI's embeddings response (llama-cpp-python's create_embedding)."""
        vectors, n_tokens = self.embed(input if isinstance(input, list) else [input], return_count=True)
        return {
            "object": "list",
            "data": [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vectors)],
            "model": model if model is not None else self.model_path,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        }

    def close(self) -> None:
        with self._lock:
            if self._context is not None:
                self._context.close()
                self._context = None


def _check_input(input: object) -> None:
    if isinstance(input, str):
        return
    if not isinstance(input, list) or not input or not all(isinstance(text, str) for text in input):
        raise ValueError("input must be a string or a non-empty list of strings")
