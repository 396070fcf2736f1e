"""RiverModel: the high-level object a user holds — an engine, its tokenizer, generation.

The engine (river_cpp.engine._core) owns weights, KV cache and graphs; this class adds
text, argument checking, and the generation loop from river_cpp.decoding.generation.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import weakref
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from river_cpp._cpus import default_n_threads
from river_cpp.decoding.decision import (
    Decoding,
    SpeculativeOption,
    check_alone,
    check_policy,
    decide,
    preset_decoding,
    sampling_defaults,
)
from river_cpp.decoding.exit_stats import ExitStats
from river_cpp.decoding.generation import GenerationResult, GenerationStream, stream_generate
from river_cpp.decoding.policy import ExitPolicy
from river_cpp.decoding.presets import DEFAULT
from river_cpp.decoding.sampling import SamplingParams
from river_cpp.decoding.speculative import Speculative
from river_cpp.engine import _core
from river_cpp.engine._ggml import set_ggml_verbosity
from river_cpp.engine._lock import ModelLock
from river_cpp.engine.context import check_fits
from river_cpp.engine.extra_bufts import ENV, ExtraBufts, extra_bufts
from river_cpp.engine.language_model import ROUTES
from river_cpp.engine.placement import Placement, offload_devices, plan_placement
from river_cpp.engine.river import DEFAULT_HEAD_TYPE, RiverSpec, load_cached_river
from river_cpp.engine.river_choice import RiverChoice, resolve_river
from river_cpp.engine.rpc import connect_rpc_servers, gone_servers, hold_links, release_links
from river_cpp.engine.tokenizer import Tokenizer

DEFAULT_N_BATCH = 512
PREFILL_MODES = ("exit", "backbone")
DEFAULT_PREFILL = DEFAULT.prefill
# Prepared exit configurations a model keeps for the policies it last ran (a server
# may see a new tau in every request: the memo stays small).
_MAX_EXIT_CONFIGS = 16


def _default_head(river: Union[str, os.PathLike, None]) -> Union[bool, str]:
    """river_head=None: no low-bit head without a river, a given river file's own head,
    a DEFAULT_HEAD_TYPE head for a river built here."""
    if river is None:
        return False
    return True if _is_river_file(os.fspath(river)) else DEFAULT_HEAD_TYPE


def _is_river_file(river: str) -> bool:
    """Whether `river` names a river file rather than a type to build."""
    return os.path.exists(river) or river.endswith(".gguf")


def _lose_gone_devices(engine: _core.Engine, remote_devices: Mapping[str, Sequence[str]]) -> list[str]:
    """The servers of `remote_devices` (endpoint -> device names) that went away; their
    devices are marked lost on the engine, which then never talks to them again."""
    gone = gone_servers(remote_devices)
    for endpoint in gone:
        for name in remote_devices[endpoint]:
            engine.lose_device(name)
    return gone


def _let_go(engine: _core.Engine, remote_devices: Mapping[str, Sequence[str]]) -> None:
    """Release a model's links to its RPC servers, after marking the devices of those
    that went away as lost, so that freeing the engine leaks their memory instead of
    waiting on a dead connection. Runs at close, or when a model is collected unclosed."""
    _lose_gone_devices(engine, remote_devices)
    release_links(remote_devices)


_SAMPLING_FIELDS = frozenset(f.name for f in dataclasses.fields(SamplingParams))


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
        river: Union[str, os.PathLike, None] = DEFAULT.river,
        river_types: Optional[Mapping[int, str]] = None,
        policy: Optional[ExitPolicy] = None,
        speculative: SpeculativeOption = None,
        prefill: str = DEFAULT_PREFILL,
        tail_layers: int = 0,
        river_head: Union[bool, str, None] = None,
        progress: bool = True,
        use_mmap: bool = True,
        n_gpu_layers: int = -1,
        main_gpu: int = 0,
        rpc_servers: Sequence[str] = (),
        reuse_graphs: bool = True,
    ) -> None:
        """Load a GGUF backbone and, unless ``river`` is None, its river.

        river: "auto" (default): the river type that pays on this file and thread
            count, or none (river_cpp.engine.river_choice; `river_choice` says which
            and why); a ggml type name ("q4_0", "q4_k", "iq4_nl", "q5_k", "q6_k",
            "q8_0"): build (once, cached) a river of that type from the backbone; or
            the path of a river GGUF made for this backbone; or None for the backbone alone.
        river_types: per-layer overrides of the river type, e.g. {28: "q8_0", 29: "q8_0"}.
        policy: the default exit policy of decoding: when tokens leave the backbone.
            None (default): never, so every token is the backbone's own (exact).
        speculative: the default draft of decoding (river_cpp.Speculative; True: the
            default one). None (default): drafts verified by the backbone whenever the
            policy never exits: the river and n-gram matches from the context with a
            river, n-gram matches alone without one. False: plain decoding. The
            output is the backbone's either way; drafting changes only its speed.
            Both are resolved by river_cpp.decoding.decision and fixed for the
            model's life (read-only); each generate() / create_*completion() call
            may override them for itself.
        prefill: "backbone" (default: the prompt always runs the full backbone, so its
            KV cache is full precision) or "exit" (the prompt exits at one depth, as
            decode tokens do).
        tail_layers: exited tokens return to the backbone for the last m layers.
        river_head: the LM head of exited tokens. None (default): a Q4_0 head built
            with the river (the lossless preset's: the draft's head), or a given river
            file's own head; False: the backbone's;
            True: a head of the river's type; a type name (e.g. "q8_0"): that type.
        use_mmap: map the backbone and river files (default; pages load on demand
            and are shared between processes), or read them into memory (False): for
            files that may change while loaded, or network filesystems. A mapped file
            that changes on disk makes the next forward raise (see check_files).
        n_gpu_layers: backbone layers to put on the GPU (or other device): -1 (default)
            all that fit, 0 none. Whenever it is not 0, the KV cache and the river go
            first, then backbone layers from the first; see river_cpp.engine.placement. Without
            a device (a CPU-only ggml) everything computes on the host.
        main_gpu: the device to fill first, as an index into the offloading devices.
        rpc_servers: "host:port" of `river-cpp rpc-server`s whose devices join the
            placement (ggml built with -DGGML_RPC=on).
        reuse_graphs: keep decode graphs for later steps (default); False builds
            every graph afresh (for measuring what reuse saves).
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
        # The default's choice of river (None where the caller named one), before this
        # model's engine and logging are set up: its first timing loads the backbone on its own.
        self.river_choice: Optional[RiverChoice]
        exits = policy is not None and policy != ExitPolicy.never()
        river, self.river_choice = resolve_river(path, river, n_threads=n_threads, exits=exits)
        connect_rpc_servers(rpc_servers)
        # Both are process-wide, as ggml's logging is: the latest model's verbosity holds.
        set_ggml_verbosity(verbose)
        _core.set_log_sink((lambda level, message: print(f"river-cpp: {message}")) if verbose else None)
        # the CPU's extra buffer types that proved to work here (RIVER_CPP_EXTRA_BUFTS)
        self.extra_bufts: ExtraBufts = extra_bufts()
        self._engine: Optional[_core.Engine] = _core.Engine(
            path,
            _positive_int("n_ctx", n_ctx),
            DEFAULT_N_BATCH,
            n_threads,
            bool(use_mmap),
            cpu_extra_bufts=list(self.extra_bufts.allowed),
            reuse_graphs=bool(reuse_graphs),
        )
        self._tokenizer = Tokenizer(path)
        self.river_path: Optional[Path] = None
        if tail_layers > self.n_layer:
            raise ValueError(f"tail_layers must be at most n_layer = {self.n_layer}, got {tail_layers}")
        if river_head is None:
            river_head = _default_head(river)
        self._load_river(river, river_types, river_head, progress)
        devices = offload_devices(rpc_servers)
        self.placement: Placement = plan_placement(self.engine.placement_sizes(), devices, n_gpu_layers, main_gpu)
        self.engine.place(**self.placement.engine_arguments())
        # The RPC servers that hold part of this model, with their devices: a forward
        # first checks that they are still there (river_cpp.engine.rpc).
        servers = {str(s) for s in rpc_servers}
        self._remote_devices: dict[str, list[str]] = {}
        for d in devices:
            if d.description in servers and d.name in self.placement.devices:
                self._remote_devices.setdefault(d.description, []).append(d.name)
        self._release_servers: Optional[weakref.finalize] = None
        if self._remote_devices:
            hold_links(self._remote_devices)
            self._release_servers = weakref.finalize(self, _let_go, self._engine, self._remote_devices)
            self._check_servers()
        if verbose:
            if self.river_choice is not None:
                print("river-cpp: " + self.river_choice.describe(), file=sys.stderr)
            print("river-cpp: placement\n" + self.placement.describe(), file=sys.stderr)
            print("river-cpp: " + self.describe_buffer_types(), file=sys.stderr)
        self._prefill = prefill
        self._tail_layers = tail_layers
        self._river_head = bool(river_head)
        # Each policy's prepared _core.ExitConfig (by policy and exit_vocab): settings
        # a forward hands the engine, not a copy of the engine's state.
        self._exit_configs: dict[tuple[ExitPolicy, int], Optional[_core.ExitConfig]] = {}
        self._defaults: Decoding = decide(
            preset_decoding(DEFAULT, has_river=self.has_river),
            n_layer=self.n_layer,
            has_river=self.has_river,
            policy=policy,
            speculative=speculative,
        )
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

    def _check_servers(self) -> None:
        """Raise RiverError when an RPC server holding part of this model went away."""
        gone = _lose_gone_devices(self.engine, self._remote_devices)
        if gone:
            raise _core.RiverError(
                f"the RPC server at {gone[0]} went away, and with it this model's layers there: close "
                "the model and load it again without that server (only a new process can use a server "
                "there again)"
            )

    def close(self) -> None:
        """Free the weights mapping, KV cache and tokenizer (after a running
        generation ends). Idempotent. Returns at once when an RPC server of this
        model went away: what lived there is leaked, not freed on a dead connection."""
        with self._lock:
            if self._engine is not None:
                if self._release_servers is not None:
                    self._release_servers()
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
        """The default exit policy of decoding (read-only: a call's own `policy=`
        overrides it for that call)."""
        return self._defaults.policy

    @property
    def speculative(self) -> Optional[Speculative]:
        """The default draft of decoding (None: plain decoding; read-only: a call's
        own `speculative=` overrides it for that call)."""
        return self._defaults.speculative

    @property
    def prefill(self) -> str:
        """The prompt's route: "backbone" (full precision) or "exit" (read-only)."""
        return self._prefill

    def check_policy(self, policy: ExitPolicy) -> None:
        """TypeError / ValueError unless `policy` applies to this model."""
        check_policy(policy, n_layer=self.n_layer, has_river=self.has_river)

    def decoding(
        self,
        kind: str = "generate",
        *,
        policy: Optional[ExitPolicy] = None,
        speculative: SpeculativeOption = None,
        sampling: Optional[SamplingParams] = None,
        **sampling_options: Any,
    ) -> Decoding:
        """How a call of entry `kind` ("generate", "completion", "chat", "repl"; see
        river_cpp.decoding.decision.SAMPLING_DEFAULTS) with these options decodes
        on this model: river_cpp.decoding.decision.decide over the model's defaults."""
        defaults = Decoding(self.policy, self.speculative, sampling_defaults(kind))
        return decide(
            defaults,
            n_layer=self.n_layer,
            has_river=self.has_river,
            policy=policy,
            speculative=speculative,
            sampling=sampling,
            **sampling_options,
        )

    def _exit_config(self, policy: ExitPolicy, exit_vocab: int) -> Optional[_core.ExitConfig]:
        """The engine's prepared form of `policy` with `exit_vocab` (None: it never
        exits, so the forward runs the full backbone), built once per pair."""
        key = (policy, exit_vocab)
        try:
            return self._exit_configs[key]
        except KeyError:
            pass
        config = None
        if policy.exits(self.n_layer):
            config = _core.ExitConfig(
                policy.resolve(self.n_layer), policy.signal, self._tail_layers, self._river_head, exit_vocab
            )
        if len(self._exit_configs) >= _MAX_EXIT_CONFIGS:
            self._exit_configs.clear()
        self._exit_configs[key] = config
        return config

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

    def cached_prefix(self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None) -> int:
        """How many leading `ids` the cache holds as a cold forward of them on `route`
        (under `policy`, default the model's) computes them (the prompt cache), at
        most len(ids) - 1.

        Only positions computed by the full backbone qualify, and only when the
        route runs the full backbone (or the policy never exits): a prompt that exits
        leaves at a depth chosen for the whole batch.
        """
        policy = self.policy if policy is None else policy
        if self._uses_exit(route, len(ids)) and policy.exits(self.n_layer):
            return 0
        n = 0
        for token, cached, depth in zip(ids[:-1], self._cached_ids, self._cached_depths):
            if token != cached or depth != self.n_layer:
                break
            n += 1
        return n

    def forward(
        self,
        ids: Sequence[int],
        *,
        last_only: bool = False,
        route: str = "auto",
        policy: Optional[ExitPolicy] = None,
        exit_vocab: Optional[int] = None,
    ) -> np.ndarray:
        """Append `ids` to the sequence and return their logits.

        Returns float32 of shape [len(ids), n_vocab], or [1, n_vocab] for the last
        position only when `last_only` (what generation needs). `route` picks the
        weights (river_cpp.engine.language_model.ROUTES): by default a multi-token forward
        is a prompt (the full backbone unless prefill="exit") and one token a decode
        step (the exit policy). With an exit, the batch leaves at one depth; see
        last_exit_layers. `policy`: the exit policy of this forward (None: the
        model's). `exit_vocab`: exited tokens score only token ids [0, exit_vocab)
        (their other logits are -inf; None: all): a speculative draft's head is a
        large share of its cost, and BPE vocabularies put frequent tokens first.
        Raises RiverError when an RPC server holding part of the model went away
        (and from then on).
        """
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError("ids must be a non-empty 1-D sequence of token ids")
        if not np.issubdtype(ids.dtype, np.integer):
            raise TypeError(f"token ids must be integers, got dtype {ids.dtype}")
        use_exit = self._uses_exit(route, ids.size)
        if policy is not None:
            self.check_policy(policy)
        if exit_vocab is not None and (
            isinstance(exit_vocab, bool)
            or not isinstance(exit_vocab, (int, np.integer))
            or not 1 <= exit_vocab <= self.n_vocab
        ):
            raise ValueError(f"exit_vocab must be None or an integer in [1, {self.n_vocab}], got {exit_vocab!r}")
        exit_config = None
        if use_exit:
            exit_config = self._exit_config(self.policy if policy is None else policy, int(exit_vocab or 0))
        with self._lock:
            check_fits(int(ids.size), self.n_ctx, cached=self.n_past, room=0)
            if self._remote_devices:
                self._check_servers()
            logits = self.engine.forward(ids.astype(np.int32, copy=False), bool(last_only), exit_config)
            self._cached_ids.extend(int(t) for t in ids)
            self._cached_depths.extend(int(d) for d in self.engine.last_exit_layers)
        return logits

    # ---------------------------------------------------------------- generation

    def generate(
        self,
        prompt: Union[str, Sequence[int]],
        *,
        stream: bool = False,
        policy: Optional[ExitPolicy] = None,
        speculative: SpeculativeOption = None,
        sampling: Optional[SamplingParams] = None,
        decoding: Optional[Decoding] = None,
        **options: Any,
    ) -> Union[GenerationResult, GenerationStream]:
        """Generate a continuation of `prompt`; see river_cpp.decoding.generation.generate.

        The backbone's own tokens unless a lossy decode is asked for. `policy`,
        `speculative` and the sampling settings (`sampling` and/or temperature, top_k,
        ... one by one) apply to this call only, resolved over the model's defaults
        by river_cpp.decoding.decision (self.decoding): with none, the model's
        defaults; with a policy that exits, plain decoding under it;
        speculative=False, plain decoding under the model's policy. `decoding`: an
        already resolved Decoding instead of those options.
        Holds the model's lock while it runs (a stream: from its first chunk until it
        is exhausted or closed), so other threads' calls wait their turn.
        """
        sampling_options = {name: options.pop(name) for name in _SAMPLING_FIELDS & options.keys()}
        if decoding is None:
            decoding = self.decoding(policy=policy, speculative=speculative, sampling=sampling, **sampling_options)
        else:
            check_alone(policy, speculative, sampling, sampling_options)
        chunks = stream_generate(self, prompt, decoding=decoding, **options)
        locked = GenerationStream(self._locked(chunks))
        if stream:
            return locked
        for _ in locked:
            pass
        return locked.result

    def reusable_prefix(self, ids: Sequence[int], decoding: Decoding) -> int:
        """How many leading `ids` a generate() call decoding so would reuse from the
        cache (the prompt cache's hits)."""
        if decoding.drafts:
            return self.cached_prefix(ids, route="backbone")  # a speculative prompt runs the backbone
        return self.cached_prefix(ids, route="prompt", policy=decoding.policy)

    def _locked(self, stream):
        """`stream`'s chunks and result, with the lock held from its first chunk."""
        with self._lock:
            try:
                yield from stream
            finally:
                stream.close()
        return stream.result

    def create_completion(self, prompt: Union[str, Sequence[int]], **options: Any):
        """An OpenAI-shaped text completion (llama-cpp-python's create_completion);
        see river_cpp.apps.completions.create_completion."""
        from river_cpp.apps.completions import create_completion

        return create_completion(self, prompt, **options)

    def create_chat_completion(self, messages: Sequence[Mapping[str, object]], **options: Any):
        """An OpenAI-shaped chat completion (llama-cpp-python's create_chat_completion);
        see river_cpp.apps.completions.create_chat_completion."""
        from river_cpp.apps.completions import create_chat_completion

        return create_chat_completion(self, messages, **options)

    # ---------------------------------------------------------------- the Hugging Face Hub

    @classmethod
    def from_pretrained(
        cls,
        repo_id: str,
        filename: Optional[str] = None,
        *,
        revision: Optional[str] = None,
        cache_dir: Union[str, os.PathLike, None] = None,
        **kwargs,
    ) -> RiverModel:
        """Load a GGUF from a Hugging Face repository (llama-cpp-python's from_pretrained).

        `filename` is a path in the repository or a glob matching exactly one file,
        case-insensitive (e.g. "*Q8_0.gguf"; None: the repository's one GGUF). The
        file is downloaded into huggingface_hub's cache unless it is there already;
        HF_HUB_OFFLINE=1 reads the cache only. Other keyword arguments go to
        RiverModel(). Needs the `[hf]` extra; see river_cpp.apps.hub.
        """
        from river_cpp.apps.hub import download

        return cls(download(repo_id, filename, revision=revision, cache_dir=cache_dir), **kwargs)
