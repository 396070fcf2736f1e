"""RiverModel: the high-level object a user holds — an engine, its tokenizer, generation.

The engine (river_cpp._core) owns weights, KV cache and graphs; this class adds
text, argument checking, and the generation loop from river_cpp.generation.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from river_cpp import _core
from river_cpp._ggml import set_ggml_verbosity
from river_cpp._lock import ModelLock
from river_cpp.exit_stats import ExitStats
from river_cpp.extra_bufts import ENV, ExtraBufts, extra_bufts
from river_cpp.language_model import ROUTES
from river_cpp.placement import Placement, connect_rpc_servers, offload_devices, plan_placement
from river_cpp.policy import ExitPolicy
from river_cpp.presets import DEFAULT
from river_cpp.river import DEFAULT_HEAD_TYPE, DEFAULT_RIVER_TYPE, RiverSpec, load_cached_river
from river_cpp.tokenizer import Tokenizer

DEFAULT_N_BATCH = 512
PREFILL_MODES = ("exit", "backbone")
DEFAULT_PREFILL = DEFAULT.prefill


def _default_head(river: Union[str, os.PathLike, None]) -> Union[bool, str]:
    """river_head=None: no low-bit head without a river, a given river file's own head,
    a DEFAULT_HEAD_TYPE head for a river built here."""
    if river is None:
        return False
    return True if _is_river_file(os.fspath(river)) else DEFAULT_HEAD_TYPE


def _is_river_file(river: str) -> bool:
    """Whether `river` names a river file rather than a type to build."""
    return os.path.exists(river) or river.endswith(".gguf")


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
        river: Union[str, os.PathLike, None] = DEFAULT_RIVER_TYPE,
        river_types: Optional[Mapping[int, str]] = None,
        policy: Optional[ExitPolicy] = None,
        prefill: str = DEFAULT_PREFILL,
        tail_layers: int = 0,
        river_head: Union[bool, str, None] = None,
        progress: bool = True,
        use_mmap: bool = True,
        n_gpu_layers: int = -1,
        main_gpu: int = 0,
        rpc_servers: Sequence[str] = (),
    ) -> None:
        """Load a GGUF backbone and, unless ``river`` is None, its river.

        river: a ggml type name ("q4_0", "q4_k", "iq4_nl", "q5_k", "q6_k", "q8_0"):
            build (once, cached) a river of that type from the backbone; or the path
            of a river GGUF made for this backbone; or None for the backbone alone.
        river_types: per-layer overrides of the river type, e.g. {28: "q8_0", 29: "q8_0"}.
        policy: when tokens leave the backbone (default: ExitPolicy.at_layer(0) with a
            river, so every decoded token runs on it; never without). With the default
            prefill the prompt still runs the full backbone.
        prefill: "backbone" (default: the prompt always runs the full backbone, so its
            KV cache is full precision) or "exit" (the prompt exits at one depth, as
            decode tokens do).
        tail_layers: exited tokens return to the backbone for the last m layers.
        river_head: the LM head of exited tokens. None (default): a Q8_0 head built
            with the river, or a given river file's own head; False: the backbone's;
            True: a head of the river's type; a type name (e.g. "q8_0"): that type.
        use_mmap: map the backbone and river files (default; pages load on demand
            and are shared between processes), or read them into memory (False): for
            files that may change while loaded, or network filesystems. A mapped file
            that changes on disk makes the next forward raise (see check_files).
        n_gpu_layers: backbone layers to put on the GPU (or other device): -1 (default)
            all that fit, 0 none. Whenever it is not 0, the KV cache and the river go
            first, then backbone layers from the first; see river_cpp.placement. Without
            a device (a CPU-only ggml) everything computes on the host.
        main_gpu: the device to fill first, as an index into the offloading devices.
        rpc_servers: "host:port" of `river-cpp rpc-server`s whose devices join the
            placement (ggml built with -DGGML_RPC=on).
        """
        if prefill not in PREFILL_MODES:
            raise ValueError(f"prefill must be one of {PREFILL_MODES}, got {prefill!r}")
        if isinstance(tail_layers, bool) or not isinstance(tail_layers, int) or tail_layers < 0:
            raise ValueError(f"tail_layers must be a non-negative integer, got {tail_layers!r}")
        path = os.fspath(model_path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"model file not found: {path}")
        if os.path.isdir(path):
            raise IsADirectoryError(f"model path is a directory, not a GGUF file: {path}")
        self.model_path = path
        # Every call that touches the engine or the cache serializes on this lock;
        # a stream holds it from its first token until it is exhausted or closed.
        self._lock = ModelLock()
        self.seed = seed
        self.verbose = verbose
        n_threads = default_n_threads() if n_threads is None else _positive_int("n_threads", n_threads)
        connect_rpc_servers(rpc_servers)
        set_ggml_verbosity(verbose)
        if verbose:
            _core.set_log_sink(lambda level, message: print(f"river-cpp: {message}"))
        # the CPU's extra buffer types that proved to work here (RIVER_CPP_EXTRA_BUFTS)
        self.extra_bufts: ExtraBufts = extra_bufts()
        self._engine: Optional[_core.Engine] = _core.Engine(
            path,
            _positive_int("n_ctx", n_ctx),
            DEFAULT_N_BATCH,
            n_threads,
            bool(use_mmap),
            cpu_extra_bufts=list(self.extra_bufts.allowed),
        )
        self._tokenizer = Tokenizer(path)
        self.river_path: Optional[Path] = None
        if tail_layers > self.n_layer:
            raise ValueError(f"tail_layers must be at most n_layer = {self.n_layer}, got {tail_layers}")
        if river_head is None:
            river_head = _default_head(river)
        self._load_river(river, river_types, river_head, progress)
        self.placement: Placement = plan_placement(
            self.engine.placement_sizes(), offload_devices(rpc_servers), n_gpu_layers, main_gpu
        )
        self.engine.place(**self.placement.engine_arguments())
        if verbose:
            print("river-cpp: placement\n" + self.placement.describe(), file=sys.stderr)
            print("river-cpp: " + self.describe_buffer_types(), file=sys.stderr)
        self.prefill = prefill
        self._tail_layers = tail_layers
        self._river_head = bool(river_head)
        self._exit_vocab = 0
        if policy is None:
            policy = DEFAULT.policy if self.has_river else ExitPolicy.never()
        self.policy = policy
        # What the cache holds, for the prompt cache: each position's token and the
        # backbone layers that computed it (n_layer: the full backbone).
        self._cached_ids: list[int] = []
        self._cached_depths: list[int] = []

    def _load_river(
        self,
        river: Union[str, os.PathLike, None],
        river_types: Optional[Mapping[int, str]],
        river_head: Union[bool, str],
        progress: bool,
    ) -> None:
        head_type = river_head if isinstance(river_head, str) else None
        if river is None:
            if river_types or river_head:
                raise ValueError("river_types and river_head need a river")
            return
        river = os.fspath(river)
        if _is_river_file(river):
            if river_types or head_type:
                raise ValueError("river_types and a river_head type apply to built rivers, not to a given river file")
            if not os.path.isfile(river):
                raise FileNotFoundError(f"river file not found: {river}")
            self.engine.load_river(river)
            self.river_path = Path(river)
            return
        spec = RiverSpec(default_type=river, layer_types=dict(river_types or {}), head_type=head_type or river)
        spec.types_for(self.n_layer)
        self.river_path = load_cached_river(
            self.engine, Path(self.model_path), spec, n_threads=self.n_threads, progress=progress
        )

    # ---------------------------------------------------------------- lifecycle

    def check_files(self) -> None:
        """Raise RiverError when the backbone or river file changed on disk (another
        inode, size or mtime) since it was loaded with use_mmap: its mapped weights may
        no longer be the ones validated at load. Costs a stat() per file; every
        forward (and so every generation step) runs it first."""
        self.engine.check_files()

    def close(self) -> None:
        """Free the weights mapping, KV cache and tokenizer (after a running
        generation ends). Idempotent."""
        with self._lock:
            if self._engine is not None:
                self._engine = None
                self._tokenizer.close()

    def __enter__(self) -> RiverModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def engine(self) -> _core.Engine:
        self._check_open()
        return self._engine

    def _check_open(self) -> None:
        if self._engine is None:
            raise ValueError("this RiverModel is closed")

    def describe_buffer_types(self) -> str:
        """Lines for `river-cpp generate -v`: the buffer types holding the host's weights
        (the CPU's extra types with their matrix counts, and those not used and why)."""
        decision, used = self.extra_bufts, self.engine.repacked_by_buffer_type
        lines = [f"host buffer types ({ENV}={decision.mode}):"]
        for name in decision.available:
            if name not in decision.allowed:
                state = "not used: " + decision.why_not(name)
            else:
                state = f"{used[name]} matrices" if used.get(name) else "allowed; no matrix of a type it takes"
            lines.append(f"  {name:<12} {state}")
        lines.append(f"  {'CPU':<12} the other host weights")
        return "\n".join(lines)

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
    def has_river(self) -> bool:
        return self.engine.has_river

    @property
    def policy(self) -> ExitPolicy:
        """When tokens leave the backbone; assign a new ExitPolicy at any time."""
        return self._policy

    @policy.setter
    def policy(self, policy: ExitPolicy) -> None:
        if not isinstance(policy, ExitPolicy):
            raise TypeError(f"policy must be an ExitPolicy, got {type(policy).__name__}")
        thresholds = policy.resolve(self.n_layer)
        if not self.has_river and any(t != float("inf") for t in thresholds):
            raise ValueError("this model has no river (river=None): only ExitPolicy.never() applies")
        with self._lock:
            self.engine.set_exit(thresholds, policy.signal, self._tail_layers, self._river_head, self._exit_vocab)
            self._policy = policy

    @property
    def exit_vocab(self) -> Optional[int]:
        """Exited tokens score only token ids [0, exit_vocab) (None: all of them).

        Their other logits are -inf. Backbone tokens always score the whole
        vocabulary. A speculative draft uses this: the head is a large share of a
        small draft's cost, and BPE vocabularies put their frequent tokens first.
        """
        return self._exit_vocab or None

    @exit_vocab.setter
    def exit_vocab(self, value: Optional[int]) -> None:
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= self.n_vocab
        ):
            raise ValueError(f"exit_vocab must be None or an integer in [1, {self.n_vocab}], got {value!r}")
        with self._lock:
            previous, self._exit_vocab = self._exit_vocab, int(value or 0)
            try:
                self.policy = self._policy
            except BaseException:
                self._exit_vocab = previous
                raise

    @property
    def last_exit_layers(self) -> np.ndarray:
        """Backbone layers each token of the last forward ran (n_layer: never left)."""
        return self.engine.last_exit_layers

    def exit_stats(self, exit_layers: Sequence[int]) -> ExitStats:
        """Summary of a per-token exit record of this model."""
        return ExitStats.from_exit_layers(exit_layers, self.n_layer)

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    # ---------------------------------------------------------------- text

    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of `text` (llama.cpp's tokenizer for this GGUF)."""
        self._check_open()
        return self._tokenizer.tokenize(text, add_bos=add_bos, special=special)

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of `ids`; invalid UTF-8 is replaced."""
        self._check_open()
        return self._tokenizer.detokenize(ids)

    # ---------------------------------------------------------------- compute

    def reset(self) -> None:
        """Forget the sequence: the next forward starts at position 0."""
        with self._lock:
            self.engine.reset()
            self._cached_ids.clear()
            self._cached_depths.clear()

    def rewind(self, n_past: int) -> None:
        """Shorten the cached sequence to its first `n_past` positions."""
        with self._lock:
            if isinstance(n_past, bool) or not isinstance(n_past, (int, np.integer)) or not 0 <= n_past <= self.n_past:
                raise ValueError(f"n_past must be an integer in [0, {self.n_past}], got {n_past!r}")
            self.engine.rewind(int(n_past))
            del self._cached_ids[n_past:], self._cached_depths[n_past:]

    def _uses_exit(self, route: str, n_ids: int) -> bool:
        """Whether a forward of n_ids tokens on `route` follows the exit policy (else it
        runs the full backbone): "auto" is a prompt for several tokens, a decode step for
        one; prefill="backbone" keeps the prompt's KV full precision."""
        if route not in ROUTES:
            raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
        if route == "auto":
            route = "prompt" if n_ids > 1 else "decode"
        return route == "decode" or (route == "prompt" and self.prefill != "backbone")

    def cached_prefix(self, ids: Sequence[int], *, route: str = "prompt") -> int:
        """How many leading `ids` the cache holds as a cold forward of them on `route`
        computes them (the prompt cache), at most len(ids) - 1.

        Only positions computed by the full backbone qualify, and only when the
        route runs the full backbone (or the policy never exits): a prompt that exits
        leaves at a depth chosen for the whole batch.
        """
        exits = any(t != float("inf") for t in self.policy.resolve(self.n_layer))
        if self._uses_exit(route, len(ids)) and exits:
            return 0
        n = 0
        for token, cached, depth in zip(ids[:-1], self._cached_ids, self._cached_depths):
            if token != cached or depth != self.n_layer:
                break
            n += 1
        return n

    def forward(self, ids: Sequence[int], *, last_only: bool = False, route: str = "auto") -> np.ndarray:
        """Append `ids` to the sequence and return their logits.

        Returns float32 of shape [len(ids), n_vocab], or [1, n_vocab] for the last
        position only when `last_only` (what generation needs). `route` picks the
        weights (river_cpp.language_model.ROUTES): by default a multi-token forward
        is a prompt (the full backbone unless prefill="exit") and one token a decode
        step (the policy's exit). With an exit, the batch leaves at one depth; see
        last_exit_layers.
        """
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError("ids must be a non-empty 1-D sequence of token ids")
        if not np.issubdtype(ids.dtype, np.integer):
            raise TypeError(f"token ids must be integers, got dtype {ids.dtype}")
        use_exit = self._uses_exit(route, ids.size)
        with self._lock:
            if self.n_past + ids.size > self.n_ctx:
                raise ValueError(
                    f"context overflow: {self.n_past} cached + {ids.size} new tokens > n_ctx = {self.n_ctx}"
                )
            logits = self.engine.forward(ids.astype(np.int32, copy=False), bool(last_only), use_exit)
            self._cached_ids.extend(int(t) for t in ids)
            self._cached_depths.extend(int(d) for d in self.engine.last_exit_layers)
        return logits

    # ---------------------------------------------------------------- generation

    def generate(self, prompt: Union[str, Sequence[int]], *, stream: bool = False, **options):
        """Generate a continuation of `prompt`; see river_cpp.generation.generate.

        Holds the model's lock while it runs (a stream: from its first chunk until it
        is exhausted or closed), so other threads' calls wait their turn.
        """
        from river_cpp.generation import GenerationStream, stream_generate

        locked = GenerationStream(self._locked(stream_generate(self, prompt, **options)))
        if stream:
            return locked
        for _ in locked:
            pass
        return locked.result

    def _locked(self, stream):
        """`stream`'s chunks and result, with the lock held from its first chunk."""
        with self._lock:
            try:
                yield from stream
            finally:
                stream.close()
        return stream.result

    def create_completion(self, prompt: Union[str, Sequence[int]], **options):
        """An OpenAI-shaped text completion (llama-cpp-python's create_completion);
        see river_cpp.completions.create_completion."""
        from river_cpp.completions import create_completion

        return create_completion(self, prompt, **options)

    def create_chat_completion(self, messages: Sequence[Mapping[str, object]], **options):
        """An OpenAI-shaped chat completion (llama-cpp-python's create_chat_completion);
        see river_cpp.completions.create_chat_completion."""
        from river_cpp.completions import create_chat_completion

        return create_chat_completion(self, messages, **options)
