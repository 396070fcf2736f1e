"""llama.cpp as a peer: llama-cpp-python's Llama behind the LanguageModel protocol.

The one place measurement sets up llama-cpp-python. Bench, eval and humaneval run
their llama.cpp rows through it with the same loop as River's
(river_cpp.decoding.generation.generate_step), the same tokenizer (river-cpp's, on the same
file) and RiverModel's settings: the same threads for batches and single tokens,
512-token batches, no flash attention, and the CPU extra buffer types river-cpp's
probe allows (river_cpp.engine.extra_bufts; llama.cpp can only take all or none of them). It
has one weight set, so every route is the same, every token runs all layers, and it
keeps no prompt cache.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence, Union

import numpy as np

from river_cpp.decoding.policy import ExitPolicy
from river_cpp.engine import _core
from river_cpp.engine.context import check_fits
from river_cpp.engine.gguf_info import read_gguf_info
from river_cpp.engine.language_model import ROUTES
from river_cpp.engine.tokenizer import Tokenizer

if TYPE_CHECKING:
    import llama_cpp

N_BATCH = 512

_default_params_lock = threading.Lock()
# A NULL-terminated list of no devices (llama_model_params.devices).
_NO_DEVICES = (ctypes.c_void_p * 1)()


def peer_note() -> Optional[str]:
    """Why llama.cpp peers run without the CPU's extra buffer types (and so without
    their repacked layouts) in this process; None when they use them."""
    from river_cpp.engine.extra_bufts import extra_bufts

    return extra_bufts().llama_cpp_note()


def load_llama(path: Union[str, os.PathLike], *, cpu_only: bool = False, **options) -> llama_cpp.Llama:
    """llama_cpp.Llama(path, **options), with use_extra_bufts=False where peer_note()
    says the CPU's extra buffer types are not all allowed (a type that fails the probe
    would crash llama.cpp's first batch too); cpu_only: with an empty device list, so
    that llama.cpp computes on the CPU alone (without one it takes every device ggml
    registered in the process, even at n_gpu_layers=0)."""
    import llama_cpp
    import llama_cpp.llama_cpp as low_level

    without_extra_bufts = peer_note() is not None
    if not without_extra_bufts and not cpu_only:
        return llama_cpp.Llama(str(path), **options)
    # Llama() has no use_extra_bufts or devices argument (0.3.36): it loads the model
    # inside its constructor from llama_model_default_params(), so that is where the
    # fields are set.
    with _default_params_lock:
        default_params = low_level.llama_model_default_params

        def adjusted():
            params = default_params()
            if without_extra_bufts:
                params.use_extra_bufts = False
            if cpu_only:
                params.devices = ctypes.addressof(_NO_DEVICES)
            return params

        low_level.llama_model_default_params = adjusted
        try:
            llama = llama_cpp.Llama(str(path), **options)
        finally:
            low_level.llama_model_default_params = default_params
    if without_extra_bufts and llama.model_params.use_extra_bufts:
        llama.close()
        raise RuntimeError("this llama-cpp-python ignored use_extra_bufts=False; the peer would use unsafe layouts")
    return llama


def load_prompt_lookup(
    path: Union[str, os.PathLike], *, n_ctx: int, n_threads: int, max_draft: int, cpu_only: bool = False
) -> llama_cpp.Llama:
    """load_llama with llama-cpp-python's own prompt-lookup loop (LlamaPromptLookupDecoding,
    up to max_draft tokens a round): the peer the lossless and repeated-work benchmarks
    compare with."""
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    return load_llama(
        path,
        cpu_only=cpu_only,
        n_ctx=n_ctx,
        n_threads=n_threads,
        n_threads_batch=n_threads,
        n_batch=512,
        draft_model=LlamaPromptLookupDecoding(num_pred_tokens=max_draft),
        # its loop reads the scores of every drafted position: past n_batch tokens of
        # context a Llama without logits_all has no row for them
        logits_all=True,
        verbose=False,
    )


class LlamaCppPeer:
    """A GGUF run by llama.cpp (llama-cpp-python), as a river_cpp LanguageModel."""

    def __init__(
        self,
        path: Union[str, os.PathLike],
        *,
        n_ctx: int = 2048,
        n_threads: Optional[int] = None,
        seed: Optional[int] = None,
        name: Optional[str] = None,
        n_gpu_layers: int = -1,
    ) -> None:
        import llama_cpp

        from river_cpp.engine._ggml import set_ggml_verbosity
        from river_cpp.engine.model import default_n_threads

        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"model file not found: {self.path}")
        self.name = name or f"llama.cpp {self.path.name}"
        self.seed = seed
        n_threads = default_n_threads() if n_threads is None else n_threads
        self._n_threads = n_threads
        self._n_layer = int(read_gguf_info(self.path).n_layer)
        set_ggml_verbosity(False)  # loading a vocabulary logs every metadata key otherwise
        self._llama_cpp = llama_cpp
        # llama.cpp aborts the process on some broken vocabularies: check before it loads
        _core.check_vocabulary(str(self.path))
        # why it runs without the CPU's extra buffer types (None: it uses them)
        self.extra_bufts_note: Optional[str] = peer_note()
        self._llama: Optional[llama_cpp.Llama] = load_llama(
            self.path,
            n_ctx=n_ctx,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            n_batch=N_BATCH,
            n_ubatch=N_BATCH,
            flash_attn=False,
            n_gpu_layers=n_gpu_layers,
            logits_all=False,
            verbose=False,
        )
        # river-cpp's tokenizer, so that prompts split and pieces join exactly as for RiverModel
        self._tokenizer = Tokenizer(str(self.path))

    # ---------------------------------------------------------------- lifecycle

    @property
    def llama(self):
        """The llama_cpp.Llama; ValueError once closed."""
        if self._llama is None:
            raise ValueError(f"{self.name} is closed")
        return self._llama

    def close(self) -> None:
        """Free the llama.cpp context and model and the tokenizer. Idempotent."""
        if self._llama is not None:
            self._llama.close()
            self._llama = None
            self._tokenizer.close()

    def __enter__(self) -> LlamaCppPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- the protocol

    @property
    def n_vocab(self) -> int:
        return self.llama.n_vocab()

    @property
    def n_ctx(self) -> int:
        return self.llama.n_ctx()

    @property
    def n_past(self) -> int:
        return self.llama.n_tokens

    @property
    def n_layer(self) -> int:
        return self._n_layer

    @property
    def n_threads(self) -> int:
        return self._n_threads

    @property
    def has_river(self) -> bool:
        return False

    @property
    def policy(self) -> ExitPolicy:
        """One weight set: no token leaves it."""
        return ExitPolicy.never()

    def check_policy(self, policy: ExitPolicy) -> None:
        if not isinstance(policy, ExitPolicy):
            raise TypeError(f"policy must be an ExitPolicy, got {type(policy).__name__}")
        if policy.exits(self.n_layer):
            raise ValueError(f"{self.name} has no river: only ExitPolicy.never() applies")

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    @property
    def last_exit_layers(self) -> np.ndarray:
        """Every token runs every layer."""
        return np.full(max(1, self._last_n_tokens), self.n_layer, dtype=np.int32)

    _last_n_tokens = 0

    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        return self._tokenizer.tokenize(text, add_bos=add_bos, special=special)

    def reset(self) -> None:
        self.rewind(0)

    def rewind(self, n_past: int) -> None:
        """Keep the first `n_past` positions of the cache."""
        if isinstance(n_past, bool) or not isinstance(n_past, (int, np.integer)) or not 0 <= n_past <= self.n_past:
            raise ValueError(f"n_past must be an integer in [0, {self.n_past}], got {n_past!r}")
        self.llama._ctx.kv_cache_seq_rm(-1, int(n_past), -1)
        self.llama.n_tokens = int(n_past)

    def cached_prefix(self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None) -> int:
        """No prompt cache: every prompt runs from an empty cache."""
        return 0

    def forward(
        self,
        ids: Sequence[int],
        *,
        last_only: bool = False,
        route: str = "auto",
        policy: Optional[ExitPolicy] = None,
        exit_vocab: Optional[int] = None,
    ) -> np.ndarray:
        """Append `ids` to the cache, in N_BATCH-token batches; float32 logits
        [len(ids), n_vocab], or [1, n_vocab] of the last position when `last_only`
        (then llama.cpp computes no other row). No token exits: `policy` must never
        exit, and `exit_vocab` (which limits exited tokens) changes nothing."""
        if route not in ROUTES:
            raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
        if policy is not None:
            self.check_policy(policy)
        ids = [int(t) for t in ids]
        if not ids:
            raise ValueError("ids must be a non-empty sequence of token ids")
        llama = self.llama
        check_fits(len(ids), self.n_ctx, cached=llama.n_tokens, room=0)
        n_vocab = self.n_vocab
        logits = np.empty((1 if last_only else len(ids), n_vocab), dtype=np.float32)
        llama._ctx.kv_cache_seq_rm(-1, llama.n_tokens, -1)
        for start in range(0, len(ids), N_BATCH):
            batch = ids[start : start + N_BATCH]
            llama._batch.set_batch(batch=batch, n_past=llama.n_tokens, logits_all=not last_only)
            llama._ctx.decode(llama._batch)
            llama.input_ids[llama.n_tokens : llama.n_tokens + len(batch)] = batch
            llama.n_tokens += len(batch)
            if not last_only:
                rows = np.ctypeslib.as_array(llama._ctx.get_logits(), shape=(len(batch) * n_vocab,))
                logits[start : start + len(batch)] = rows.reshape(len(batch), n_vocab)
        if last_only:
            pointer = self._llama_cpp.llama_get_logits_ith(llama.ctx, -1)
            logits[0] = np.ctypeslib.as_array(pointer, shape=(n_vocab,))
        self._last_n_tokens = len(ids)
        return logits

    def generate(self, prompt: Union[str, Sequence[int]], **options):
        """Generate a continuation of `prompt`; see river_cpp.decoding.generation.generate."""
        from river_cpp.decoding.generation import generate

        return generate(self, prompt, **options)
