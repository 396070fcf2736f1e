"""RiverModel: the high-level object a user holds — an engine, its tokenizer, generation.

The engine (river_cpp._core) owns weights, KV cache and graphs; this class adds
text, argument checking, and the generation loop from river_cpp.generation.
"""

from __future__ import annotations

import os
from typing import Iterator, Optional, Sequence, Union

import numpy as np

from river_cpp import _core
from river_cpp.tokenizer import Tokenizer

DEFAULT_N_BATCH = 512


def default_n_threads() -> int:
    """All cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


class RiverModel:
    """A GGUF language model run by river-cpp's engine.

    >>> with RiverModel("model.gguf") as model:
    ...     print(model.generate("The capital of France is", max_tokens=8).text)
    """

    def __init__(
        self,
        model_path: Union[str, os.PathLike],
        *,
        n_ctx: int = 2048,
        n_threads: Optional[int] = None,
        seed: Optional[int] = None,
        verbose: bool = False,
    ) -> None:
        path = os.fspath(model_path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"model file not found: {path}")
        if os.path.isdir(path):
            raise IsADirectoryError(f"model path is a directory, not a GGUF file: {path}")
        self.model_path = path
        self.seed = seed
        self.verbose = verbose
        n_threads = default_n_threads() if n_threads is None else _positive_int("n_threads", n_threads)
        if verbose:
            _core.set_log_sink(lambda level, message: print(f"river-cpp: {message}"))
        self._engine: Optional[_core.Engine] = _core.Engine(
            path, _positive_int("n_ctx", n_ctx), DEFAULT_N_BATCH, n_threads
        )
        self._tokenizer = Tokenizer(path, verbose=verbose)

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Free the weights mapping, KV cache and tokenizer. Idempotent."""
        if self._engine is not None:
            self._engine = None
            self._tokenizer.close()

    def __enter__(self) -> "RiverModel":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def engine(self) -> _core.Engine:
        if self._engine is None:
            raise ValueError("this RiverModel is closed")
        return self._engine

    # ---------------------------------------------------------------- sizes

    @property
    def n_layer(self) -> int:
        return self.engine.n_layer

    @property
    def n_vocab(self) -> int:
        return self.engine.n_vocab

    @property
    def n_ctx(self) -> int:
        return self.engine.n_ctx

    @property
    def n_past(self) -> int:
        """Number of positions in the KV cache."""
        return self.engine.n_past

    @property
    def n_threads(self) -> int:
        return self.engine.n_threads

    @n_threads.setter
    def n_threads(self, value: int) -> None:
        self.engine.n_threads = _positive_int("n_threads", value)

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    # ---------------------------------------------------------------- text

    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of `text` (llama.cpp's tokenizer for this GGUF)."""
        self.engine  # raises when closed
        return self._tokenizer.tokenize(text, add_bos=add_bos, special=special)

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of `ids`; invalid UTF-8 is replaced."""
        self.engine
        return self._tokenizer.detokenize(ids)

    # ---------------------------------------------------------------- compute

    def reset(self) -> None:
        """Forget the sequence: the next forward starts at position 0."""
        self.engine.reset()

    def rewind(self, n_past: int) -> None:
        """Shorten the cached sequence to its first `n_past` positions."""
        if isinstance(n_past, bool) or not isinstance(n_past, (int, np.integer)) or not 0 <= n_past <= self.n_past:
            raise ValueError(f"n_past must be an integer in [0, {self.n_past}], got {n_past!r}")
        self.engine.rewind(int(n_past))

    def forward(self, ids: Sequence[int], *, last_only: bool = False) -> np.ndarray:
        """Append `ids` to the sequence and return their logits.

        Returns float32 of shape [len(ids), n_vocab], or [1, n_vocab] for the last
        position only when `last_only` (what generation needs).
        """
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError("ids must be a non-empty 1-D sequence of token ids")
        if not np.issubdtype(ids.dtype, np.integer):
            raise TypeError(f"token ids must be integers, got dtype {ids.dtype}")
        if self.n_past + ids.size > self.n_ctx:
            raise ValueError(
                f"context overflow: {self.n_past} cached + {ids.size} new tokens > n_ctx = {self.n_ctx}"
            )
        return self.engine.forward(ids.astype(np.int32, copy=False), bool(last_only))

    # ---------------------------------------------------------------- generation

    def generate(self, prompt: Union[str, Sequence[int]], **options):
        """Generate a continuation of `prompt`; see river_cpp.generation.generate."""
        from river_cpp.generation import generate

        return generate(self, prompt, **options)
