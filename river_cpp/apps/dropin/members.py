"""What river_cpp.Llama shows back as llama-cpp-python's `Llama` does: the members
frameworks read (context_params, model_params, metadata, the tokenizer object) and
save_state()'s LlamaState.

The values come from the GGUF's header and the options river-cpp loads with
(river_cpp.apps.dropin.compat sorts the keywords); nothing here loads or runs a model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from river_cpp.apps.dropin.compat import IGNORED, LlamaKeywords, rope_settings
from river_cpp.engine.compute.load_options import KV_CACHE_TYPES, LoadOptions
from river_cpp.engine.files.gguf_info import ArraySummary, GgufInfo


@dataclass
class LlamaState:
    """What save_state() keeps: the token sequence and seed. load_state() recomputes
    the KV cache of the tokens (the engine does not serialize its cache)."""

    input_ids: np.ndarray
    n_tokens: int
    seed: int


@dataclass
class ContextParams:
    """llama-cpp-python's `context_params` (llama_context_params) as river-cpp runs:
    the fields frameworks read, with the values in effect."""

    n_ctx: int
    n_batch: int
    n_ubatch: int
    n_seq_max: int
    n_threads: int
    n_threads_batch: int
    rope_scaling_type: int
    pooling_type: int
    attention_type: int
    rope_freq_base: float
    rope_freq_scale: float
    yarn_ext_factor: float
    yarn_attn_factor: float
    yarn_beta_fast: float
    yarn_beta_slow: float
    yarn_orig_ctx: int
    embeddings: bool
    offload_kqv: bool
    flash_attn: bool
    no_perf: bool
    type_k: int  # llama.cpp's GGML_TYPE number of the KV cache's K (1: F16, 8: Q8_0)
    type_v: int


@dataclass
class ModelParams:
    """llama-cpp-python's `model_params` (llama_model_params), as river-cpp runs."""

    n_gpu_layers: int
    split_mode: int
    main_gpu: int
    tensor_split: Optional[Sequence[float]]
    vocab_only: bool
    use_mmap: bool
    use_mlock: bool
    kv_overrides: Optional[Mapping[str, Any]]


def context_params(info: GgufInfo, keywords: LlamaKeywords, pooling_type: int, *, embedding: bool) -> ContextParams:
    """The context_params of a Llama constructed with `keywords` (its load options,
    llama.cpp's sizing keywords and attention type), on the GGUF's RoPE settings."""
    options, sizing = keywords.load_options, keywords.sizing
    n_batch = min(options.n_ctx, int(sizing["n_batch"]))
    rope_type, rope_base, rope_scale = rope_settings(info)
    return ContextParams(
        n_ctx=options.n_ctx,
        n_batch=n_batch,
        n_ubatch=min(n_batch, int(sizing["n_ubatch"])),
        n_seq_max=options.n_seq_max,
        n_threads=options.n_threads,
        n_threads_batch=int(sizing["n_threads_batch"] or options.n_threads),
        rope_scaling_type=rope_type,
        pooling_type=pooling_type,
        attention_type=keywords.attention_type,
        rope_freq_base=rope_base,
        rope_freq_scale=rope_scale,
        yarn_ext_factor=-1.0,
        yarn_attn_factor=1.0,
        yarn_beta_fast=32.0,
        yarn_beta_slow=1.0,
        yarn_orig_ctx=0,
        embeddings=embedding,
        offload_kqv=True,
        flash_attn=False,
        no_perf=bool(sizing["no_perf"]),
        type_k=KV_CACHE_TYPES[options.type_k],
        type_v=KV_CACHE_TYPES[options.type_v],
    )


def model_params(options: LoadOptions) -> ModelParams:
    """The model_params of a Llama loaded with `options`."""
    return ModelParams(
        n_gpu_layers=options.n_gpu_layers,
        split_mode=IGNORED["split_mode"][0],
        main_gpu=options.main_gpu,
        tensor_split=None,
        vocab_only=False,
        use_mmap=options.use_mmap,
        use_mlock=False,
        kv_overrides=None,
    )


def metadata(info: GgufInfo) -> dict[str, str]:
    """The GGUF's key-values as llama.cpp gives them to llama-cpp-python's `metadata`:
    every key that is not an array, its value as text (floats with six decimals,
    booleans as true / false)."""
    out = {}
    for key, value in info.metadata.items():
        if isinstance(value, (list, ArraySummary)):
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, float):
            out[key] = f"{value:.6f}"
        else:
            out[key] = str(value)
    return out


class LlamaTokenizer:
    """llama-cpp-python's LlamaTokenizer API (Llama.tokenizer(), Llama.tokenizer_) on
    a river_cpp.Llama: bytes in tokenize / detokenize, text in encode / decode."""

    def __init__(self, llama: Any) -> None:
        self._llama = llama

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> list[int]:
        """Token ids of UTF-8 `text`."""
        return self._llama.tokenize(text, add_bos=add_bos, special=special)

    def detokenize(
        self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None, special: bool = False
    ) -> bytes:
        """The bytes of `tokens` (as they continue `prev_tokens`, when given)."""
        return self._llama.detokenize(tokens, prev_tokens=prev_tokens, special=special)

    def encode(self, text: str, add_bos: bool = True, special: bool = True) -> list[int]:
        """Token ids of `text`."""
        return self.tokenize(text.encode("utf-8", errors="ignore"), add_bos=add_bos, special=special)

    def decode(self, tokens: Sequence[int]) -> str:
        """The text of `tokens` (invalid UTF-8 dropped, as llama-cpp-python does)."""
        return self.detokenize(tokens).decode("utf-8", errors="ignore")

    @classmethod
    def from_ggml_file(cls, path: str) -> LlamaTokenizer:
        """The tokenizer of the GGUF at `path` (its vocabulary only)."""
        return cls(_VocabOnly(path))


class _VocabOnly:
    """A GGUF's tokenizer behind Llama's tokenize / detokenize."""

    def __init__(self, path: str) -> None:
        from river_cpp.engine.compute.tokenizer import Tokenizer

        self._tokenizer = Tokenizer(os.fspath(path))

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        return self._tokenizer.tokenize(text, add_bos=add_bos, special=special)

    def detokenize(
        self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None, special: bool = False
    ) -> bytes:
        if prev_tokens is None:
            return self._tokenizer.detokenize_bytes(tokens, special=special)
        before = self._tokenizer.detokenize_bytes(prev_tokens, special=special)
        return self._tokenizer.detokenize_bytes([*prev_tokens, *tokens], special=special)[len(before) :]
