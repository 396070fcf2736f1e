"""The graph backbone: river-cpp's own ggml graph of a GGUF, with its river.

Owns the C++ engine (river_cpp.engine._core): weights, the KV cache the backbone and
the river share, exit configurations, placement on devices and RPC servers, and the
record of what the cache holds (the prompt cache's prefix). It knows nothing of
decoding: forwards take an exit policy as an argument, and which river to load is
decided above it (river_cpp.engine.decisions.river_choice, called by the facade).
"""

from __future__ import annotations

import os
import sys
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, NamedTuple, Optional, Sequence, Union

import numpy as np

from river_cpp.engine import _core
from river_cpp.engine._ggml import set_ggml_verbosity
from river_cpp.engine.compute.backbone import ROUTES, check_n_past, check_token_ids
from river_cpp.engine.compute.batcher import ForwardRequest, deliver
from river_cpp.engine.compute.context import check_fits
from river_cpp.engine.compute.load_options import LoadOptions, positive_int
from river_cpp.engine.compute.placement import Placement, describe_attention, offload_devices, plan_placement
from river_cpp.engine.compute.policy import ExitPolicy, check_policy
from river_cpp.engine.compute.tokenizer import Tokenizer
from river_cpp.engine.files.river import DEFAULT_HEAD_TYPE, RiverSpec, load_cached_river
from river_cpp.engine.probes.extra_bufts import ENV, ExtraBufts, extra_bufts
from river_cpp.engine.probes.own_products import OwnProducts, own_products
from river_cpp.engine.probes.rpc import connect_rpc_servers, gone_servers, hold_links, release_links

if TYPE_CHECKING:
    from river_cpp._cpus import ThreadGovernor
    from river_cpp.engine.compute.prompt_cache import PromptCache

DEFAULT_N_BATCH = 512
# Prepared exit configurations a backbone keeps for the policies it last ran (a server
# may see a new tau in every request: the memo stays small).
_MAX_EXIT_CONFIGS = 16


def default_head(river: Union[str, os.PathLike, None]) -> Union[bool, str]:
    """river_head=None: no low-bit head without a river, a given river file's own head,
    a DEFAULT_HEAD_TYPE head for a river built here."""
    if river is None:
        return False
    return True if is_river_file(os.fspath(river)) else DEFAULT_HEAD_TYPE


def is_river_file(river: str) -> bool:
    """Whether `river` names a river file rather than a type to build."""
    return os.path.exists(river) or river.endswith(".gguf")


def planned_attention(path: str, options: LoadOptions) -> dict[str, list[str]]:
    """Which attention each layer of the backbone at `path` would run, loaded with
    `options` (_core.Engine.attention_plan: per layer, why ggml's attention takes it, ""
    where ours does), its layers placed as GraphBackbone places them (without a river,
    whose layers would go to a device first). Maps the file; places and computes nothing."""
    engine = _core.Engine(
        path,
        options.n_ctx,
        DEFAULT_N_BATCH,
        1,
        n_seq=options.n_seq_max,
        own_attention=bool(options.own_attention),
        type_k=options.type_k,
        type_v=options.type_v,
    )
    devices = offload_devices(options.rpc_servers)
    placement = plan_placement(engine.placement_sizes(), devices, options.n_gpu_layers, options.main_gpu)
    return engine.attention_plan(**placement.engine_arguments())


def _lose_gone_devices(engine: _core.Engine, remote_devices: Mapping[str, Sequence[str]]) -> list[str]:
    """The servers of `remote_devices` (endpoint -> device names) that went away; their
    devices are marked lost on the engine, which then never talks to them again."""
    gone = gone_servers(remote_devices)
    for endpoint in gone:
        for name in remote_devices[endpoint]:
            engine.lose_device(name)
    return gone


def _let_go(engine: _core.Engine, remote_devices: Mapping[str, Sequence[str]]) -> None:
    """Release a backbone's links to its RPC servers, after marking the devices of those
    that went away as lost, so that freeing the engine leaks their memory instead of
    waiting on a dead connection. Runs at close, or when a backbone is collected unclosed."""
    _lose_gone_devices(engine, remote_devices)
    release_links(remote_devices)


class _SavedSequence(NamedTuple):
    """A sequence's state as GraphBackbone.save_sequence saves it."""

    ids: list[int]
    depths: list[int]
    exit_layers: np.ndarray
    kv: bytes


class GraphBackbone:
    """A GGUF run by river-cpp's graph, with an optional river on its KV cache."""

    kind = "graph"
    # Set by the facade (RiverModel): the prompt cache across requests, and the thread
    # count's governor (river_cpp._cpus.ThreadGovernor); None: neither.
    prompt_cache: Optional[PromptCache] = None
    governor: Optional[ThreadGovernor] = None
    _state_key: Optional[str] = None
    seed: Optional[int] = None
    rewinds_anywhere = True  # a KV cache: the prompt cache may restore any prefix of an entry

    def __init__(self, path: str, options: LoadOptions) -> None:
        """Load the backbone at `path` and, unless `options.river` is None, its river
        (a type to build, once and cached, or a river GGUF; not "auto", which the
        facade resolves first: river_cpp.engine.decisions.loading)."""
        if options.auto_river:
            raise ValueError(
                "river='auto' is resolved before a graph backbone loads (river_cpp.engine.decisions.loading)"
            )
        self.model_path = path
        connect_rpc_servers(options.rpc_servers)
        # Both are process-wide, as ggml's logging is: the latest model's verbosity holds.
        set_ggml_verbosity(options.verbose)
        _core.set_log_sink(
            (lambda level, message: print(f"river-cpp: {message}", file=sys.stderr)) if options.verbose else None
        )
        # the CPU's extra buffer types that proved to work here (RIVER_CPP_EXTRA_BUFTS)
        self.extra_bufts: ExtraBufts = extra_bufts()
        # our own batch-invariant products, where they passed their probe here (RIVER_CPP_OWN_PRODUCTS)
        self.own_products: OwnProducts = own_products()
        self._engine: Optional[_core.Engine] = _core.Engine(
            path,
            options.n_ctx,
            DEFAULT_N_BATCH,
            options.n_threads,
            bool(options.use_mmap),
            cpu_extra_bufts=list(self.extra_bufts.allowed),
            reuse_graphs=bool(options.reuse_graphs),
            exact=options.engine_exact,
            n_seq=options.n_seq_max,
            own_attention=bool(options.own_attention),
            type_k=options.type_k,
            type_v=options.type_v,
            **self.own_products.engine_arguments(),
        )
        # What decoding learns of drafting on this model, kept with it (one for all its
        # sequences: river_cpp.decoding.speculative).
        self.learned_drafting: dict = {}
        self._tokenizer = Tokenizer(path)
        self.river_path: Optional[Path] = None
        if options.tail_layers > self.n_layer:
            raise ValueError(f"tail_layers must be at most n_layer = {self.n_layer}, got {options.tail_layers}")
        river_head = default_head(options.river) if options.river_head is None else options.river_head
        self._load_river(options.river, options.river_types, river_head, options.progress)
        devices = offload_devices(options.rpc_servers)
        self.placement: Placement = plan_placement(
            self.engine.placement_sizes(), devices, options.n_gpu_layers, options.main_gpu
        )
        self.engine.place(**self.placement.engine_arguments())
        # The RPC servers that hold part of this model, with their devices: a forward
        # first checks that they are still there (river_cpp.engine.probes.rpc).
        servers = set(options.rpc_servers)
        self._remote_devices: dict[str, list[str]] = {}
        for d in devices:
            if d.description in servers and d.name in self.placement.devices:
                self._remote_devices.setdefault(d.description, []).append(d.name)
        self._release_servers: Optional[weakref.finalize] = None
        if self._remote_devices:
            hold_links(self._remote_devices)
            self._release_servers = weakref.finalize(self, _let_go, self._engine, self._remote_devices)
            self._check_servers()
        if options.verbose:
            print("river-cpp: placement\n" + self.placement.describe(), file=sys.stderr)
            print("river-cpp: " + self.describe_buffer_types(), file=sys.stderr)
            print("river-cpp: attention: " + self.describe_attention(), file=sys.stderr)
        self.prefill = options.prefill
        self._tail_layers = options.tail_layers
        self._river_head = bool(river_head)
        # Each policy's prepared _core.ExitConfig (by policy and exit_vocab): settings
        # a forward hands the engine, not a copy of the engine's state.
        self._exit_configs: dict[tuple[ExitPolicy, int], Optional[_core.ExitConfig]] = {}
        # What each sequence of the cache holds, for the prompt cache: each position's
        # token and the backbone layers that computed it (n_layer: the full backbone).
        self._cached_ids: list[list[int]] = [[] for _ in range(options.n_seq_max)]
        self._cached_depths: list[list[int]] = [[] for _ in range(options.n_seq_max)]
        self._last_exit_layers: list[np.ndarray] = [np.zeros(0, np.int32)] * options.n_seq_max
        self._sequences: dict[int, BackboneSequence] = {}

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
        if is_river_file(river):
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
        """Free the weights mapping, KV cache and tokenizer. Idempotent. Returns at once
        when an RPC server of this model went away: what lived there is leaked, not
        freed on a dead connection."""
        if self._engine is not None:
            if self._release_servers is not None:
                self._release_servers()
            self._engine = None
            self._tokenizer.close()

    def __enter__(self) -> GraphBackbone:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._engine is None

    @property
    def engine(self) -> _core.Engine:
        """The C++ engine; ValueError once closed."""
        if self._engine is None:
            raise ValueError("this RiverModel is closed")
        return self._engine

    @property
    def attention(self) -> dict[str, list[str]]:
        """Per layer of the backbone and the river, why ggml's attention computes it
        ("" where river-cpp's own does): _core.Engine.attention_plan of this placement."""
        return self.engine.attention

    def describe_attention(self) -> str:
        """One line: which attention each layer runs, and why ggml's where it does."""
        return describe_attention(self.attention)

    def describe_buffer_types(self) -> str:
        """Lines for `river-cpp generate -v`: the buffer types holding the host's weights
        (our own products' layout and the CPU's extra types with their matrix counts, and
        those not used and why)."""
        decision, used = self.extra_bufts, self.engine.repacked_by_buffer_type
        packed = self.engine.own_products
        lines = [f"host buffer types ({ENV}={decision.mode}):"]
        if packed:
            counts = ", ".join(f"{n} {t}" for t, n in packed.items())
            kernels = self.engine.own_kernels
            lines.append(f"  {'own':<12} {sum(packed.values())} matrices ({counts}), our own products on {kernels}")
        else:
            lines.append(f"  {'own':<12} not used: {self.own_products.reason}")
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
    def n_embd(self) -> int:
        return self.engine.n_embd

    @property
    def n_ctx(self) -> int:
        return self.engine.n_ctx

    @property
    def n_past(self) -> int:
        """Number of positions in the KV cache (sequence 0's)."""
        return self.engine.n_past

    @property
    def n_seq(self) -> int:
        """Sequences the KV cache holds, n_ctx positions each."""
        return self.engine.n_seq

    @property
    def n_batch(self) -> int:
        """Rows the engine computes in one batch."""
        return DEFAULT_N_BATCH

    def seq_n_past(self, seq: int) -> int:
        """Positions sequence `seq` holds."""
        return self.engine.seq_n_past(seq)

    @property
    def n_threads(self) -> int:
        return self.engine.n_threads

    @n_threads.setter
    def n_threads(self, value: int) -> None:
        self.engine.n_threads = positive_int("n_threads", value)

    @property
    def has_river(self) -> bool:
        return self.engine.has_river

    @property
    def arch(self) -> str:
        return self.engine.arch

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of `text` (llama.cpp's tokenizer for this GGUF)."""
        return self._tokenizer.tokenize(text, add_bos=add_bos, special=special)

    @property
    def policy(self) -> ExitPolicy:
        """Forwards that name no policy run the full backbone."""
        return ExitPolicy.never()

    def check_policy(self, policy: ExitPolicy) -> None:
        """TypeError / ValueError unless `policy` applies to this backbone."""
        check_policy(policy, n_layer=self.n_layer, has_river=self.has_river)

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
        return self._last_exit_layers[0]

    def seq_last_exit_layers(self, seq: int) -> np.ndarray:
        """Backbone layers each token of sequence `seq`'s last forward ran."""
        return self._last_exit_layers[seq]

    # ---------------------------------------------------------------- compute

    @property
    def cached_ids(self) -> list[int]:
        """The token ids sequence 0 holds, position by position."""
        return self.sequence_ids(0)

    def sequence_ids(self, seq: int) -> list[int]:
        """The token ids sequence `seq` holds, position by position."""
        return list(self._cached_ids[seq])

    def reset(self, *, seq: int = 0) -> None:
        """Forget sequence `seq`: its next forward starts at position 0."""
        self.engine.reset(seq)
        self._cached_ids[seq].clear()
        self._cached_depths[seq].clear()

    def rewind(self, n_past: int, *, seq: int = 0) -> None:
        """Shorten sequence `seq` to its first `n_past` positions."""
        n_past = check_n_past(n_past, self.engine.seq_n_past(seq))
        self.engine.rewind(n_past, seq)
        del self._cached_ids[seq][n_past:], self._cached_depths[seq][n_past:]

    def sequence(self, seq: int) -> BackboneSequence:
        """Sequence `seq` of the cache as a backbone of its own: one object per
        sequence, so that what a loop learns per backbone (drafting) stays with it."""
        self.seq_n_past(seq)  # RiverError for a sequence the cache does not hold
        return self._sequences.setdefault(seq, BackboneSequence(self, seq))

    def _uses_exit(self, route: str, n_ids: int) -> bool:
        """Whether a forward of n_ids tokens on `route` follows the exit policy (else it
        runs the full backbone): "auto" is a prompt for several tokens, a decode step for
        one; prefill="backbone" keeps the prompt's KV full precision."""
        if route not in ROUTES:
            raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
        if route == "auto":
            route = "prompt" if n_ids > 1 else "decode"
        return route == "decode" or (route == "prompt" and self.prefill != "backbone")

    def cached_prefix(
        self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None, seq: int = 0
    ) -> int:
        """How many leading `ids` sequence `seq`, or the prompt cache, holds as a cold forward
        of them on `route` under `policy` (None: never exits) computes them, at most
        len(ids) - 1; a query. With our own attention (own_attention, on the CPU) a prompt
        continued from them is a cold forward's bits wherever it is cut; with ggml's, its
        rows may differ in the last bits from a cold prefill's.

        Only positions computed by the full backbone qualify, and only when the
        route runs the full backbone (or the policy never exits): a prompt that exits
        leaves at a depth chosen for the whole batch.
        """
        n = self._held_prefix(ids, route, policy, seq)
        if n is None:
            return 0
        if self.prompt_cache is not None:  # a longer prefix kept from an earlier request
            n = self.prompt_cache.longest(self.sequence(seq), ids, cached=n)
        return n

    def reuse_prefix(
        self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None, seq: int = 0
    ) -> int:
        """Bring sequence `seq` to the prefix cached_prefix finds (from the prompt cache
        where that holds more), dropping the rest; its length."""
        n = self._held_prefix(ids, route, policy, seq)
        if n is None:
            n = 0
        elif self.prompt_cache is not None:
            n = self.prompt_cache.restore(self.sequence(seq), ids, cached=n)
        self.rewind(n, seq=seq)
        return n

    def _held_prefix(self, ids: Sequence[int], route: str, policy: Optional[ExitPolicy], seq: int) -> Optional[int]:
        """The leading `ids` (at most len(ids) - 1) sequence `seq` holds from full-backbone
        forwards; None when the forward would exit, so no cached position qualifies."""
        if policy is not None and self._uses_exit(route, len(ids)) and policy.exits(self.n_layer):
            return None
        n = 0
        for token, cached, depth in zip(ids[:-1], self._cached_ids[seq], self._cached_depths[seq]):
            if token != cached or depth != self.n_layer:
                break
            n += 1
        return n

    # ---------------------------------------------------------------- prompt cache

    def state_key(self) -> str:
        """What a saved state is valid for (river_cpp.engine.compute.prompt_cache): the backbone
        file's identity and the cache's layout and types (a state of one type never
        serves a cache of another); the river's rows share the cache, and
        only positions the full backbone computed are saved."""
        if self._state_key is None:
            from river_cpp.engine.files.cache import file_identity

            identity = file_identity(Path(self.model_path))
            self._state_key = (
                f"graph:{identity['size']}:{identity['mtime_ns']}:{identity['head_sha256'][:16]}:"
                f"{self.n_layer}:{self.engine.n_embd_kv}:{self.engine.type_k}:{self.engine.type_v}"
            )
        return self._state_key

    def prefix_state(self, *, seq: int = 0) -> tuple[list[int], bytes]:
        """The positions of sequence `seq` the full backbone computed, from the first
        on, and their K/V."""
        n = 0
        for depth in self._cached_depths[seq]:
            if depth != self.n_layer:
                break
            n += 1
        return self._cached_ids[seq][:n], self.engine.save_kv(n, seq) if n else b""

    def restore_prefix(self, ids: Sequence[int], state: bytes, *, seq: int = 0) -> None:
        """Make sequence `seq` hold `ids` from the K/V prefix_state returned for them."""
        self.engine.load_kv(len(ids), state, seq)
        self._cached_ids[seq][:] = [int(t) for t in ids]
        self._cached_depths[seq][:] = [self.n_layer] * len(ids)

    # ---------------------------------------------------------------- a sequence lent and taken back

    def save_sequence(self, *, seq: int = 0) -> _SavedSequence:
        """Everything sequence `seq` holds (every position, exited ones too, K/V as
        stored), for load_sequence to put back: what a generation keeps while another
        holds its sequence (river_cpp.engine.compute.scheduler)."""
        n = self.engine.seq_n_past(seq)
        kv = self.engine.save_kv(n, seq) if n else b""
        return _SavedSequence(self._cached_ids[seq][:n], self._cached_depths[seq][:n], self._last_exit_layers[seq], kv)

    def load_sequence(self, saved: _SavedSequence, *, seq: int = 0) -> None:
        """Make sequence `seq` hold what save_sequence saved (of this or another sequence)."""
        if saved.ids:
            self.engine.load_kv(len(saved.ids), saved.kv, seq)
        else:
            self.engine.reset(seq)
        self._cached_ids[seq][:] = saved.ids
        self._cached_depths[seq][:] = saved.depths
        self._last_exit_layers[seq] = saved.exit_layers

    def forward(
        self,
        ids: Sequence[int],
        *,
        last_only: bool = False,
        route: str = "auto",
        policy: Optional[ExitPolicy] = None,
        exit_vocab: Optional[int] = None,
        prompt: bool = False,
        seq: int = 0,
    ) -> np.ndarray:
        """Append `ids` to sequence `seq` and return their logits.

        Returns float32 of shape [len(ids), n_vocab], or [1, n_vocab] for the last
        position only when `last_only`. `route` picks the weights
        (river_cpp.engine.compute.backbone.ROUTES); `policy` is the exit policy of a forward
        whose route follows one (None: never exits); with an exit, the batch leaves at
        one depth (see last_exit_layers). `exit_vocab`: exited tokens score only token
        ids [0, exit_vocab) (their other logits are -inf; None: all): a speculative
        draft's head is a large share of its cost, and BPE vocabularies put frequent
        tokens first. `prompt`: the ids are a prompt, which every decoding prefills
        alike, so its rows take the fastest kernels whatever `exact` says (our own products, the
        same bits as a step, where they cover the matrix; else ggml's). With several
        sequences, the scheduler runs a generation's forward in a batch with other
        sequences' (prepare_forward, river_cpp.engine.compute.batcher), each row as this
        sequence alone computes it; this call runs it alone.
        Raises RiverError when an RPC server holding part of the model went away (and
        from then on).
        """
        request = self.prepare_forward(
            ids, last_only=last_only, route=route, policy=policy, exit_vocab=exit_vocab, prompt=prompt, seq=seq
        )
        rows = self.run_rows([(seq, request.ids, request.last_only, request.prompt)], request.exit)[0]
        deliver(request, request.ids.size, rows)
        return self.complete_forward(request)

    def prepare_forward(
        self,
        ids: Sequence[int],
        *,
        last_only: bool = False,
        route: str = "auto",
        policy: Optional[ExitPolicy] = None,
        exit_vocab: Optional[int] = None,
        prompt: bool = False,
        seq: int = 0,
    ) -> ForwardRequest:
        """forward's checks, and its rows as a request for a batch (river_cpp.engine.compute.batcher),
        which the scheduler runs with other sequences' and hands to complete_forward."""
        ids = check_token_ids(ids)
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
        if use_exit and policy is not None:
            exit_config = self._exit_config(policy, int(exit_vocab or 0))
        n_past = self.engine.seq_n_past(seq)
        check_fits(int(ids.size), self.n_ctx, cached=n_past, room=0)
        ids = ids.astype(np.int32, copy=False)
        batchable = ids.size <= DEFAULT_N_BATCH and not (
            exit_config is not None and self.engine.decides_by_check(exit_config)
        )
        return ForwardRequest(seq, ids, bool(last_only), bool(prompt), exit_config, batchable, n_past=n_past)

    def complete_forward(self, request: ForwardRequest) -> np.ndarray:
        """Record what a finished request added to its sequence; its logits."""
        logits, exit_layers = request.result()
        seq = request.seq
        self._cached_ids[seq].extend(int(t) for t in request.ids)
        self._cached_depths[seq].extend(int(d) for d in exit_layers)
        self._last_exit_layers[seq] = exit_layers
        return logits

    def abandon_forward(self, request: ForwardRequest) -> None:
        """A request that failed or was dropped midway: its sequence as it was before
        (the chunks of a prompt that ran are rewound)."""
        if self.engine.seq_n_past(request.seq) > request.n_past:
            self.engine.rewind(request.n_past, request.seq)

    def run_rows(
        self, rows: Sequence[tuple[int, np.ndarray, bool, bool]], exit_config: Optional[_core.ExitConfig]
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """The one place the engine computes: (seq, ids, last_only, prompt) rows, one
        sequence's alone (any length, any exit) or several sequences' in one batch;
        each row's logits and exit layers."""
        if self._remote_devices:
            self._check_servers()
        if self.governor is not None:  # fewer threads while other processes hold CPUs
            n_threads = self.governor.threads()
            if n_threads != self.engine.n_threads:
                self.engine.n_threads = n_threads
        if len(rows) == 1:
            seq, ids, last_only, prompt = rows[0]
            logits = self.engine.forward(ids, last_only, exit_config, prompt, seq)
            return [(logits, self.engine.last_exit_layers)]
        out = self.engine.forward_many(list(rows), exit_config)
        layers = self.engine.last_exit_layers
        result, first = [], 0
        for (_, ids, _, _), logits in zip(rows, out):
            result.append((logits, layers[first : first + ids.size]))
            first += ids.size
        return result


class BackboneSequence:
    """One sequence of a GraphBackbone's cache, behind the Backbone protocol
    (river_cpp.engine.compute.backbone): what the scheduler runs a generation's requests on.
    Its draft memory is its own; what drafting learned of lengths is the model's
    (learned_drafting)."""

    kind = "graph"
    rewinds_anywhere = True

    def __init__(self, backbone: GraphBackbone, seq: int) -> None:
        self.backbone = backbone
        self.seq = seq

    @property
    def seed(self) -> Optional[int]:
        return self.backbone.seed

    @property
    def prompt_cache(self) -> Optional[PromptCache]:
        return self.backbone.prompt_cache

    @property
    def n_vocab(self) -> int:
        return self.backbone.n_vocab

    @property
    def n_ctx(self) -> int:
        return self.backbone.n_ctx

    @property
    def n_embd(self) -> int:
        return self.backbone.n_embd

    @property
    def n_layer(self) -> int:
        return self.backbone.n_layer

    @property
    def n_threads(self) -> int:
        return self.backbone.n_threads

    @property
    def has_river(self) -> bool:
        return self.backbone.has_river

    @property
    def policy(self) -> ExitPolicy:
        return self.backbone.policy

    @property
    def tokenizer(self) -> Tokenizer:
        return self.backbone.tokenizer

    @property
    def learned_drafting(self) -> dict:
        """What decoding learned of drafting: the model's, one for every sequence."""
        return self.backbone.learned_drafting

    @property
    def n_past(self) -> int:
        """Positions this sequence holds."""
        return self.backbone.seq_n_past(self.seq)

    @property
    def cached_ids(self) -> list[int]:
        return self.backbone.sequence_ids(self.seq)

    @property
    def last_exit_layers(self) -> np.ndarray:
        return self.backbone.seq_last_exit_layers(self.seq)

    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        return self.backbone.tokenize(text, add_bos=add_bos, special=special)

    def check_policy(self, policy: ExitPolicy) -> None:
        self.backbone.check_policy(policy)

    def state_key(self) -> str:
        return self.backbone.state_key()

    def reset(self) -> None:
        self.backbone.reset(seq=self.seq)

    def rewind(self, n_past: int) -> None:
        self.backbone.rewind(n_past, seq=self.seq)

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
        return self.backbone.forward(
            ids, last_only=last_only, route=route, policy=policy, exit_vocab=exit_vocab, prompt=prompt, seq=self.seq
        )

    def cached_prefix(self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None) -> int:
        return self.backbone.cached_prefix(ids, route=route, policy=policy, seq=self.seq)

    def reuse_prefix(self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None) -> int:
        return self.backbone.reuse_prefix(ids, route=route, policy=policy, seq=self.seq)

    def prefix_state(self) -> tuple[list[int], bytes]:
        return self.backbone.prefix_state(seq=self.seq)

    def restore_prefix(self, ids: Sequence[int], state: bytes) -> None:
        self.backbone.restore_prefix(ids, state, seq=self.seq)

    def save_sequence(self) -> _SavedSequence:
        return self.backbone.save_sequence(seq=self.seq)

    def load_sequence(self, saved: _SavedSequence) -> None:
        self.backbone.load_sequence(saved, seq=self.seq)
