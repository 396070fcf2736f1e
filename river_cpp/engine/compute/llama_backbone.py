"""The llama.cpp backbone: llama.cpp's own context (through llama-cpp-python) behind the
backbone interface, for every architecture llama.cpp runs.

It has one weight set and no river: every route is the full model and no token exits.
Devices, n_gpu_layers and the CPU's extra buffer types are llama.cpp's own; a batch asks
for the logits of the rows it needs, and a rewind removes the rejected positions from
llama.cpp's memory. A recurrent state (mamba, rwkv, the recurrent layers of hybrids)
cannot lose its last positions: there a rewind restores the state saved before the last
batch of several tokens (or the empty state) and runs the kept positions after it
again. It knows nothing of decoding: the exact drafts that need no river (n-grams, the
draft memory, the corpus, a grammar's forced tokens) run on it unchanged.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence, Union

import numpy as np

from river_cpp.engine import _core
from river_cpp.engine.compute.backbone import ROUTES, check_n_past, check_token_ids, common_prefix
from river_cpp.engine.compute.context import check_fits
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.engine.compute.tokenizer import Tokenizer
from river_cpp.engine.files.gguf_info import read_gguf_info

if TYPE_CHECKING:
    import llama_cpp

    from river_cpp._cpus import ThreadGovernor
    from river_cpp.engine.compute.prompt_cache import PromptCache

N_BATCH = 512

_default_params_lock = threading.Lock()
# A NULL-terminated list of no devices (llama_model_params.devices).
_NO_DEVICES = (ctypes.c_void_p * 1)()
# What llama.cpp logs when a file's general.architecture is not one of its names.
_UNKNOWN_ARCHITECTURE = "unknown model architecture"

# The memory a llama.cpp model keeps of a sequence (LlamaCppBackbone.memory).
ATTENTION = "attention"  # a KV cache, cut at any position
RECURRENT = "recurrent"  # one state per sequence, at its end (mamba, rwkv)
HYBRID = "hybrid"  # a recurrent state beside attention layers' KV cache (jamba, granitehybrid, ...)
_RESTORED = (
    "{state}, which llama.cpp keeps at the sequence's end only: each verify saves the state before "
    "it, and a rejected draft restores that and runs the kept tokens again (drafts stay exact; the "
    "round guard rests drafts whose rounds lose to plain decoding); a prompt reuses the cache, or a "
    "prompt cache entry, where it continues that sequence whole, and one that departs inside it runs "
    "again from the saved state or the start"
)
# What `river-cpp info` says a model's memory means for drafts and reused prompts.
MEMORY_NOTES = {
    ATTENTION: "a KV cache: a rejected draft's positions are dropped, and a prompt reuses any prefix "
    "it shares with the cache or the prompt cache",
    RECURRENT: _RESTORED.format(state="a recurrent state"),
    HYBRID: _RESTORED.format(state="a recurrent state beside a KV cache"),
}


def llama_cpp_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("llama-cpp-python")


def extra_bufts_note() -> Optional[str]:
    """Why llama.cpp contexts run without the CPU's extra buffer types (and so without
    their repacked layouts) in this process; None when they use them."""
    from river_cpp.engine.probes.extra_bufts import extra_bufts

    return extra_bufts().llama_cpp_note()


def load_llama(path: Union[str, os.PathLike], *, cpu_only: bool = False, **options) -> llama_cpp.Llama:
    """llama-cpp-python's own Llama(path, **options) (llama_cpp.llama.Llama, which
    patch_llama_cpp() leaves as it is), with use_extra_bufts=False where
    extra_bufts_note() says the CPU's extra buffer types are not all allowed (a type that
    fails the probe would crash llama.cpp's first batch too); cpu_only: with an empty
    device list, so that llama.cpp computes on the CPU alone (without one it takes every
    device ggml registered in the process, even at n_gpu_layers=0)."""
    import llama_cpp.llama
    import llama_cpp.llama_cpp as low_level

    without_extra_bufts = extra_bufts_note() is not None
    if not without_extra_bufts and not cpu_only:
        return llama_cpp.llama.Llama(str(path), **options)
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
            llama = llama_cpp.llama.Llama(str(path), **options)
        finally:
            low_level.llama_model_default_params = default_params
    if without_extra_bufts and llama.model_params.use_extra_bufts:
        llama.close()
        raise RuntimeError("this llama-cpp-python ignored use_extra_bufts=False; the context would use unsafe layouts")
    return llama


def model_memory(model: ctypes.c_void_p) -> str:
    """The memory (ATTENTION, RECURRENT or HYBRID) llama.cpp keeps for a loaded llama_model."""
    import llama_cpp

    if llama_cpp.llama_model_is_hybrid(model):
        return HYBRID
    if llama_cpp.llama_model_is_recurrent(model):
        return RECURRENT
    return ATTENTION


def probe_llama_cpp(path: Union[str, os.PathLike]) -> str:
    """Ask llama.cpp whether it loads the GGUF at `path` (its header and vocabulary only,
    no weights): the memory its architecture keeps (model_memory). Raises RiverError
    where it does not, saying whether llama.cpp did not recognise the architecture (then
    also which ones river-cpp's graph builds) or could not load the file."""
    import llama_cpp
    from llama_cpp import _logger

    arch = str(read_gguf_info(path).get("general.architecture", "?"))
    _core.check_vocabulary(str(path))  # llama.cpp aborts the process on some broken vocabularies
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    params.devices = ctypes.addressof(_NO_DEVICES)
    logged: list[str] = []

    @llama_cpp.llama_log_callback
    def keep_line(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        logged.append(text.decode("utf-8", errors="replace"))

    # llama.cpp says why a load failed only in its log: listen to it for this one load
    # (llama_log_set is process-wide; llama-cpp-python's own callback goes back after)
    llama_cpp.llama_log_set(keep_line, ctypes.c_void_p(0))
    try:
        model = llama_cpp.llama_model_load_from_file(os.fsencode(path), params)
    finally:
        llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
    if not model:
        raise _core.RiverError(load_failure_message(path, arch, unknown=_UNKNOWN_ARCHITECTURE in "".join(logged)))
    try:
        return model_memory(model)
    finally:
        llama_cpp.llama_model_free(model)


def load_failure_message(path: Union[str, os.PathLike], arch: str, *, unknown: bool) -> str:
    """Why neither backbone runs the file at `path`: llama.cpp did not recognise its
    architecture (`unknown`), or could not load it."""
    version = llama_cpp_version()
    if unknown:
        return (
            f"{path}: neither backbone knows the architecture '{arch}': river-cpp's graph builds "
            f"{', '.join(_core.graph_architectures())}, and llama.cpp (llama-cpp-python {version}) did not "
            "recognise it"
        )
    return (
        f"llama.cpp (llama-cpp-python {version}) could not load {path} (architecture '{arch}', which "
        "river-cpp's graph does not build): the file is damaged or incomplete"
    )


class LlamaCppBackbone:
    """A GGUF run by llama.cpp's own context, as a river-cpp backbone."""

    kind = "llama.cpp"
    # which attention it runs (RiverModel.attention, `river-cpp info MODEL`)
    attention = "llama.cpp's (its backbone computes its own attention)"
    # Set by the facade (RiverModel), as on the graph backbone.
    prompt_cache: Optional[PromptCache] = None
    governor: Optional[ThreadGovernor] = None
    _state_key: Optional[str] = None
    _applied_threads = 0
    seed: Optional[int] = None
    has_river = False
    river_path = None

    def __init__(
        self,
        path: Union[str, os.PathLike],
        *,
        n_ctx: int = 2048,
        n_threads: int,
        n_gpu_layers: int = -1,
        main_gpu: int = 0,
        use_mmap: bool = True,
        verbose: bool = False,
    ) -> None:
        """Load the GGUF at `path` into a llama.cpp context of n_ctx positions."""
        from river_cpp.engine._ggml import set_ggml_verbosity

        self.model_path = str(path)
        if not Path(path).is_file():
            raise FileNotFoundError(f"model file not found: {path}")
        info = read_gguf_info(path)
        self.arch: str = str(info.get("general.architecture", "?"))
        self._n_layer = int(info.get(f"{self.arch}.block_count", 0))
        self._n_threads = int(n_threads)
        set_ggml_verbosity(verbose)  # loading logs every metadata key otherwise
        # llama.cpp aborts the process on some broken vocabularies: check before it loads
        _core.check_vocabulary(self.model_path)
        # why it runs without the CPU's extra buffer types (None: it uses them)
        self.extra_bufts_note: Optional[str] = extra_bufts_note()
        self._llama: Optional[llama_cpp.Llama] = None
        try:
            self._llama = load_llama(
                path,
                n_ctx=n_ctx,
                n_threads=self._n_threads,
                n_threads_batch=self._n_threads,
                n_batch=N_BATCH,
                n_ubatch=N_BATCH,
                flash_attn=False,
                n_gpu_layers=n_gpu_layers,
                main_gpu=main_gpu,
                use_mmap=use_mmap,
                logits_all=False,
                verbose=verbose,
            )
        except ValueError as error:  # llama-cpp-python's "Failed to load model from file"
            probe_llama_cpp(path)  # raises, saying whether llama.cpp knows the architecture
            raise _core.RiverError(load_failure_message(path, self.arch, unknown=False)) from error
        # what a rewind can cut (ATTENTION), or must restore and run again
        self.memory: str = model_memory(self._llama.model)
        self._snapshot = _Snapshot()
        # river-cpp's tokenizer, so that prompts split and pieces join exactly as on the graph
        self._tokenizer = Tokenizer(self.model_path)
        # What decoding learns of drafting on this model, kept with it (river_cpp.decoding.speculative).
        self.learned_drafting: dict = {}
        self._last_n_tokens = 0

    # ---------------------------------------------------------------- lifecycle

    @property
    def llama(self) -> llama_cpp.Llama:
        """The llama_cpp.Llama; ValueError once closed."""
        if self._llama is None:
            raise ValueError("this RiverModel is closed")
        return self._llama

    def close(self) -> None:
        """Free the llama.cpp context and model and the tokenizer. Idempotent."""
        if self._llama is not None:
            self._llama.close()
            self._llama = None
            self._tokenizer.close()

    def __enter__(self) -> LlamaCppBackbone:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._llama is None

    def check_files(self) -> None:
        """llama.cpp keeps no record of the file's identity: nothing to check."""

    # ---------------------------------------------------------------- sizes

    @property
    def n_vocab(self) -> int:
        return self.llama.n_vocab()

    @property
    def n_embd(self) -> int:
        return self.llama.n_embd()

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
    def policy(self) -> ExitPolicy:
        """One weight set: no token leaves it."""
        return ExitPolicy.never()

    def check_policy(self, policy: ExitPolicy) -> None:
        if not isinstance(policy, ExitPolicy):
            raise TypeError(f"policy must be an ExitPolicy, got {type(policy).__name__}")
        if policy.exits(self.n_layer):
            raise ValueError(
                f"'{self.arch}' runs on llama.cpp's backbone, which has no river: only ExitPolicy.never() applies "
                "(exact decoding and its drafts from n-grams, memory, corpus and grammars work)"
            )

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    @property
    def last_exit_layers(self) -> np.ndarray:
        """Every token runs every layer."""
        return np.full(max(1, self._last_n_tokens), self.n_layer, dtype=np.int32)

    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        return self._tokenizer.tokenize(text, add_bos=add_bos, special=special)

    # ---------------------------------------------------------------- compute

    @property
    def cached_ids(self) -> list[int]:
        """The token ids the cache holds, position by position."""
        llama = self.llama
        return llama.input_ids[: llama.n_tokens].tolist()

    def reset(self) -> None:
        self.rewind(0)

    def rewind(self, n_past: int) -> None:
        """Keep the first `n_past` positions of the cache. A recurrent state cannot lose
        its last positions: it goes back to the state saved before the last batch of
        several tokens where that lies within them (else to the empty state), and the
        kept positions after it run again."""
        n_past = check_n_past(n_past, self.n_past)
        llama = self.llama
        if n_past == llama.n_tokens:
            return
        if self.memory == ATTENTION:
            self._remove_from(n_past)
            llama.n_tokens = n_past
            return
        kept = llama.input_ids[:n_past].tolist()
        start = self._snapshot.n_past
        if start is not None and start <= n_past and self._snapshot.restore(llama.ctx):
            self._remove_from(start)  # a hybrid's KV cache past the saved state
        else:
            start = 0
            self._snapshot.drop()
            self._remove_from(0)
        llama.n_tokens = start
        self._decode(kept[start:])

    @property
    def rewinds_anywhere(self) -> bool:
        """Whether the cache can be cut at any position without running it again (a KV
        cache); a recurrent state cannot (river_cpp.engine.compute.prompt_cache)."""
        return self.memory == ATTENTION

    def _reusable(self, n: int) -> int:
        """How many of the first `n` cached positions a rewind keeps without running any
        of them again: all on a KV cache, or where they are the whole cached sequence; on
        a recurrent state cut inside, those before its saved state (else none), so that a
        prompt runs the rest in one batch and reports only what it reused."""
        if self.memory == ATTENTION or n == self.n_past:
            return n
        saved = self._snapshot.n_past
        return saved if saved is not None and saved <= n else 0

    def _remove_from(self, n_past: int) -> None:
        """Drop positions n_past.. from llama.cpp's memory of the sequence; RuntimeError
        where it refuses (a recurrent state cut short)."""
        if not self.llama._ctx.kv_cache_seq_rm(0, n_past, -1):
            raise RuntimeError(
                f"llama.cpp could not drop positions {n_past}.. of its {self.memory} memory of {self.n_past}"
            )

    def cached_prefix(self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None) -> int:
        """How many leading `ids` the cache, or the prompt cache, holds (every position
        is the full model's); a query."""
        n = self._reusable(common_prefix(ids[:-1], self.cached_ids))  # the last must run
        if self.prompt_cache is not None:  # a longer prefix kept from an earlier request
            n = self.prompt_cache.longest(self, ids, cached=n)
        return n

    def reuse_prefix(self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None) -> int:
        """Bring the cache to the prefix cached_prefix finds (from the prompt cache
        where that holds more), dropping the rest; its length."""
        n = self._reusable(common_prefix(ids[:-1], self.cached_ids))
        if self.prompt_cache is not None:
            n = self.prompt_cache.restore(self, ids, cached=n)
        self.rewind(n)
        return n

    # ---------------------------------------------------------------- prompt cache

    def state_key(self) -> str:
        """What a saved state is valid for (river_cpp.engine.compute.prompt_cache): the file's
        identity, in llama.cpp's own sequence-state format."""
        if self._state_key is None:
            from river_cpp.engine.files.cache import file_identity

            identity = file_identity(Path(self.model_path))
            self._state_key = (
                f"llama.cpp:{identity['size']}:{identity['mtime_ns']}:{identity['head_sha256'][:16]}:{self.n_layer}"
            )
        return self._state_key

    def prefix_state(self) -> tuple[list[int], bytes]:
        """The cached sequence and llama.cpp's state of it (llama_state_seq_get_data)."""
        import llama_cpp

        ctx = self.llama.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(ctx, buffer, size, 0)
        return self.cached_ids, bytes(buffer[:written])

    def restore_prefix(self, ids: Sequence[int], state: bytes) -> None:
        """Make the cache hold `ids` from the state prefix_state returned for them."""
        import llama_cpp

        llama = self.llama
        self._snapshot.drop()
        self._remove_from(0)
        llama.n_tokens = 0
        buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if llama_cpp.llama_state_seq_set_data(llama.ctx, buffer, len(state), 0) != len(state):
            self._remove_from(0)
            raise ValueError("llama.cpp refused the saved sequence state")
        llama.input_ids[: len(ids)] = list(ids)
        llama.n_tokens = len(ids)

    # ---------------------------------------------------------------- a sequence lent and taken back

    def save_sequence(self) -> tuple[list[int], bytes, int]:
        """Everything the sequence holds (llama.cpp's state of it: the KV cache and a
        recurrent state as stored), for load_sequence to put back: what a generation
        keeps while another holds the sequence (river_cpp.engine.compute.scheduler)."""
        ids, state = self.prefix_state()
        return ids, state, self._last_n_tokens

    def load_sequence(self, saved: tuple[list[int], bytes, int]) -> None:
        """Make the sequence hold what save_sequence saved."""
        ids, state, self._last_n_tokens = saved
        if ids:
            self.restore_prefix(ids, state)
        else:
            self.reset()

    def forward(
        self,
        ids: Sequence[int],
        *,
        last_only: bool = False,
        route: str = "auto",
        policy: Optional[ExitPolicy] = None,
        exit_vocab: Optional[int] = None,
        prompt: bool = False,
    ) -> np.ndarray:
        """Append `ids` to the cache, in N_BATCH-token batches; float32 logits
        [len(ids), n_vocab], or [1, n_vocab] of the last position when `last_only`
        (then llama.cpp computes no other row). No token exits: `policy` must never
        exit, and `exit_vocab` (which limits exited tokens) changes nothing. llama.cpp
        picks kernels by batch size alone, so `prompt` changes nothing either."""
        if route not in ROUTES:
            raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
        if policy is not None:
            self.check_policy(policy)
        ids = [int(t) for t in check_token_ids(ids)]
        llama = self.llama
        check_fits(len(ids), self.n_ctx, cached=llama.n_tokens, room=0)
        n_vocab = self.n_vocab
        if not all(0 <= t < n_vocab for t in ids):
            raise ValueError(f"token ids must be in [0, {n_vocab})")
        logits = np.empty((1 if last_only else len(ids), n_vocab), dtype=np.float32)
        if self.governor is not None:  # fewer threads while other processes hold CPUs
            n_threads = self.governor.threads()
            if n_threads != self._applied_threads:
                import llama_cpp

                llama_cpp.llama_set_n_threads(llama.ctx, n_threads, n_threads)
                self._applied_threads = n_threads
        if self.memory != ATTENTION and len(ids) > 1 and llama.n_tokens > 0:
            # a verify's drafts (or a prompt) may be cut back to any of these positions
            self._snapshot.save(llama.ctx, llama.n_tokens)
        self._decode(ids, None if last_only else logits)
        if last_only:
            import llama_cpp

            pointer = llama_cpp.llama_get_logits_ith(llama.ctx, -1)
            logits[0] = np.ctypeslib.as_array(pointer, shape=(n_vocab,))
        self._last_n_tokens = len(ids)
        return logits

    def _decode(self, ids: Sequence[int], logits: Optional[np.ndarray] = None) -> None:
        """Append `ids` to the cache in N_BATCH-token batches; with `logits` (float32
        [len(ids), n_vocab]), every row's logits into it, else llama.cpp computes the
        last row's only. llama-cpp-python raises RuntimeError where a decode fails."""
        llama = self.llama
        n_vocab = self.n_vocab
        for start in range(0, len(ids), N_BATCH):
            batch = list(ids[start : start + N_BATCH])
            llama._batch.set_batch(batch=batch, n_past=llama.n_tokens, logits_all=logits is not None)
            llama._ctx.decode(llama._batch)
            llama.input_ids[llama.n_tokens : llama.n_tokens + len(batch)] = batch
            llama.n_tokens += len(batch)
            if logits is not None:
                rows = np.ctypeslib.as_array(llama._ctx.get_logits(), shape=(len(batch) * n_vocab,))
                logits[start : start + len(batch)] = rows.reshape(len(batch), n_vocab)


class _Snapshot:
    """A recurrent state saved before a batch: the position it was saved at and
    llama.cpp's bytes of it (llama_state_seq_get_data_ext with the partial flag: the
    recurrent state alone, without a hybrid's KV cache, which a rewind cuts), in a
    buffer kept from one save to the next."""

    def __init__(self) -> None:
        self.n_past: Optional[int] = None  # None: no state held
        self._buffer = (ctypes.c_uint8 * 0)()
        self._size = 0

    def save(self, ctx: ctypes.c_void_p, n_past: int) -> None:
        import llama_cpp

        size = llama_cpp.llama_state_seq_get_size_ext(ctx, 0, llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)
        if size > len(self._buffer):
            self._buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data_ext(
            ctx, self._buffer, size, 0, llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        )
        if written != size:
            self.drop()
            raise RuntimeError(f"llama.cpp saved {written} of the recurrent state's {size} bytes")
        self._size, self.n_past = size, n_past

    def restore(self, ctx: ctypes.c_void_p) -> bool:
        """Make the sequence's recurrent state the saved one (a hybrid's KV cache stays);
        False where llama.cpp refused it (then it holds no recurrent state)."""
        import llama_cpp

        read = llama_cpp.llama_state_seq_set_data_ext(
            ctx, self._buffer, self._size, 0, llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        )
        if read != self._size:
            self.drop()
        return read == self._size

    def drop(self) -> None:
        self.n_past = None
