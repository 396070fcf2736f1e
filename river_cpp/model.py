"""RiverModel: the object a user holds, a facade over a backbone and decoding.

The backbone computes (river_cpp.engine: river-cpp's graph with its river, or llama.cpp's
own context for the architectures the graph does not build; river_cpp.engine.backbone_choice
decides which); this class adds the decoding defaults, text, argument checking, the lock
its calls serialize on, and the generation loop from river_cpp.decoding.generation.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from river_cpp._cpus import ThreadGovernor, default_n_threads
from river_cpp.decoding.decision import (
    Decoding,
    SpeculativeOption,
    check_alone,
    decide,
    preset_decoding,
    sampling_defaults,
)
from river_cpp.decoding.exit_stats import ExitStats
from river_cpp.decoding.generation import GenerationResult, GenerationStream, stream_generate
from river_cpp.decoding.presets import DEFAULT
from river_cpp.decoding.sampling import SamplingParams
from river_cpp.decoding.speculative import Speculative
from river_cpp.engine import _core
from river_cpp.engine._lock import ModelLock
from river_cpp.engine.backbone_choice import GRAPH, BackboneChoice
from river_cpp.engine.graph_backbone import GraphBackbone, positive_int
from river_cpp.engine.llama_backbone import LlamaCppBackbone
from river_cpp.engine.policy import ExitPolicy
from river_cpp.engine.prompt_cache import PromptCache, make_prompt_cache
from river_cpp.engine.river_choice import AUTO_RIVER, RiverChoice, resolve_backbone_river
from river_cpp.engine.tokenizer import Tokenizer

DEFAULT_PREFILL = DEFAULT.prefill
_SAMPLING_FIELDS = frozenset(f.name for f in dataclasses.fields(SamplingParams))


def _check_model_path(path: str) -> None:
    if not os.path.exists(path):
        raise FileNotFoundError(f"model file not found: {path}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"model path is a directory, not a GGUF file: {path}")


def _check_without_river(choice: BackboneChoice, river: object, **graph_only) -> None:
    """ValueError naming the architecture where the llama.cpp backbone is asked for what
    only the graph has: a river, or a river's or graph's option."""
    what_works = (
        "it runs exactly, with drafts from n-grams, the draft memory, a corpus and grammars "
        "(river=None or 'auto', no exiting policy)"
    )
    where = f"'{choice.arch}' runs on llama.cpp's backbone ({choice.reason})"
    if river is not None and not (isinstance(river, str) and river.lower() == AUTO_RIVER):
        raise ValueError(f"river={river!r}: {where}, which has no river; {what_works}")
    for name, value in graph_only.items():
        if value:
            raise ValueError(f"{name}={value!r} needs river-cpp's graph backbone: {where}; {what_works}")


class RiverModel:
    """A GGUF language model run by river-cpp.

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
        engine: str = "auto",
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
        prompt_cache: Any = None,
        adapt_threads: bool = True,
        exact: Union[bool, str] = True,
    ) -> None:
        """Load a GGUF backbone and, unless ``river`` is None, its river.

        engine: the backbone (river_cpp.engine.backbone_choice): "auto" (default)
            river-cpp's graph where it builds the file's architecture (llama, qwen2,
            qwen3, gemma3), llama.cpp's own context otherwise; "graph" or "llama.cpp"
            as named. On llama.cpp's there is no river: river="auto" resolves to none,
            and a river or an exiting policy raises ValueError.
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
            all that fit, 0 none. On the graph, whenever it is not 0, the KV cache and
            the river go first, then backbone layers from the first; see
            river_cpp.engine.placement. Without a device (a CPU-only ggml) everything
            computes on the host.
        main_gpu: the device to fill first, as an index into the offloading devices.
        rpc_servers: "host:port" of `river-cpp rpc-server`s whose devices join the
            placement (ggml built with -DGGML_RPC=on; the graph backbone).
        reuse_graphs: keep decode graphs for later steps (default); False builds
            every graph afresh (for measuring what reuse saves).
        exact: a verify's rows computed as plain one-token steps compute them, bit
            for bit (the graph backbone on the CPU): True (default) for products by
            quantized matrices in the plain layout and attention; "bitwise" also by
            F32/F16/BF16 matrices, with the backbone kept out of the CPU's repacked
            layouts (slower: docs/results.md, "Identity on quantized files"); False:
            ggml's kernels by batch size.
        prompt_cache: keep the KV states of earlier requests and reuse the longest
            cached prefix of each prompt (river_cpp.engine.prompt_cache): None (default)
            or False: only the sequence the model holds; True: a PromptCache in RAM
            (2 GiB); an int: one of that many bytes; a folder: RAM and a disk tier there;
            or a PromptCache, which several models may share. Settable later.
        adapt_threads: run one thread fewer per CPU other processes keep busy
            (river_cpp._cpus.ThreadGovernor; at most n_threads), so that decoding keeps
            its share of a loaded machine (default); False: always n_threads.
        """
        path = os.fspath(model_path)
        prompt_cache = make_prompt_cache(prompt_cache)  # a bad value fails before anything loads
        _check_model_path(path)
        self.model_path = path
        # Every call that touches the backbone serializes on this lock; a stream holds
        # it from its first token until it is exhausted or closed.
        self._lock = ModelLock()
        self.seed = seed
        self.verbose = verbose
        n_threads = default_n_threads() if n_threads is None else positive_int("n_threads", n_threads)
        # The backbone, and the default's choice of river (None where the caller named one
        # or on llama.cpp's backbone), before the backbone loads: the river choice's first
        # timing loads the file on its own.
        self.backbone_choice: BackboneChoice
        self.river_choice: Optional[RiverChoice]
        exits = policy is not None and policy != ExitPolicy.never()
        self.backbone_choice, river, self.river_choice = resolve_backbone_river(
            path, river, engine=engine, n_threads=n_threads, exits=exits
        )
        self._backbone: Union[GraphBackbone, LlamaCppBackbone]
        if self.backbone_choice.kind == GRAPH:
            if verbose:
                print("river-cpp: " + self.backbone_choice.describe(), file=sys.stderr)
                if self.river_choice is not None:
                    print("river-cpp: " + self.river_choice.describe(), file=sys.stderr)
            self._backbone = GraphBackbone(
                path,
                n_ctx=n_ctx,
                n_threads=n_threads,
                verbose=verbose,
                river=river,
                river_types=river_types,
                river_head=river_head,
                prefill=prefill,
                tail_layers=tail_layers,
                progress=progress,
                use_mmap=use_mmap,
                n_gpu_layers=n_gpu_layers,
                main_gpu=main_gpu,
                rpc_servers=rpc_servers,
                reuse_graphs=reuse_graphs,
                exact=exact,
            )
        else:
            _check_without_river(
                self.backbone_choice,
                river,
                river_types=river_types,
                river_head=river_head,
                tail_layers=tail_layers,
                rpc_servers=tuple(rpc_servers),
                prefill=prefill if prefill != DEFAULT_PREFILL else None,
            )
            if verbose:
                print("river-cpp: " + self.backbone_choice.describe(), file=sys.stderr)
            self._backbone = LlamaCppBackbone(
                path,
                n_ctx=positive_int("n_ctx", n_ctx),
                n_threads=n_threads,
                n_gpu_layers=n_gpu_layers,
                main_gpu=main_gpu,
                use_mmap=use_mmap,
                verbose=verbose,
            )
            if policy is not None:
                self._backbone.check_policy(policy)  # names the architecture and what works
        self.prompt_cache = prompt_cache
        if adapt_threads:
            self._backbone.governor = ThreadGovernor(n_threads)
        self._defaults: Decoding = decide(
            preset_decoding(DEFAULT, has_river=self.has_river),
            n_layer=self.n_layer,
            has_river=self.has_river,
            policy=policy,
            speculative=speculative,
        )

    # ---------------------------------------------------------------- lifecycle

    @property
    def backbone(self) -> Union[GraphBackbone, LlamaCppBackbone]:
        """What computes: river_cpp.engine's graph or llama.cpp backbone; ValueError once closed."""
        self._check_open()
        return self._backbone

    @property
    def prompt_cache(self) -> Optional[PromptCache]:
        """The prompt cache across requests (None: none); see __init__'s prompt_cache."""
        return self._backbone.prompt_cache

    @prompt_cache.setter
    def prompt_cache(self, value: Any) -> None:
        self._backbone.prompt_cache = make_prompt_cache(value)

    @property
    def engine(self) -> _core.Engine:
        """The graph backbone's C++ engine; ValueError on llama.cpp's backbone or once closed."""
        backbone = self.backbone
        if not isinstance(backbone, GraphBackbone):
            raise ValueError(f"'{self.backbone_choice.arch}' runs on llama.cpp's backbone: it has no river-cpp engine")
        return backbone.engine

    def check_files(self) -> None:
        """Raise RiverError when the backbone or river file changed on disk (another
        inode, size or mtime) since it was loaded with use_mmap: its mapped weights may
        no longer be the ones validated at load. Costs a stat() per file; every
        forward (and so every generation step) runs it first."""
        self.backbone.check_files()

    def close(self) -> None:
        """Free the weights, KV cache and tokenizer (after a running generation ends).
        Idempotent. Returns at once when an RPC server of this model went away: what
        lived there is leaked, not freed on a dead connection."""
        with self._lock:
            self._backbone.close()

    def __enter__(self) -> RiverModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._backbone.closed:
            raise ValueError("this RiverModel is closed")

    @property
    def river_path(self):
        """The river file loaded (None: no river)."""
        return self._backbone.river_path

    @property
    def placement(self):
        """Where the graph backbone's weights live (river_cpp.engine.placement.Placement);
        None on llama.cpp's backbone, which places them itself."""
        return getattr(self._backbone, "placement", None)

    @property
    def extra_bufts(self):
        """The CPU's extra buffer types the graph backbone may use; None on llama.cpp's."""
        return getattr(self._backbone, "extra_bufts", None)

    def describe_buffer_types(self) -> str:
        """Lines for `river-cpp generate -v`: the buffer types holding the host's weights."""
        backbone = self.backbone
        if isinstance(backbone, GraphBackbone):
            return backbone.describe_buffer_types()
        note = backbone.extra_bufts_note
        return "host buffer types: llama.cpp's own" + (f" ({note})" if note else "")

    # ---------------------------------------------------------------- sizes

    @property
    def n_layer(self) -> int:
        return self.backbone.n_layer

    @property
    def n_vocab(self) -> int:
        return self.backbone.n_vocab

    @property
    def n_embd(self) -> int:
        return self.backbone.n_embd

    @property
    def n_ctx(self) -> int:
        return self.backbone.n_ctx

    @property
    def n_past(self) -> int:
        """Number of positions in the KV cache."""
        return self.backbone.n_past

    @property
    def n_threads(self) -> int:
        return self.backbone.n_threads

    @n_threads.setter
    def n_threads(self, value: int) -> None:
        backbone = self.backbone
        if not isinstance(backbone, GraphBackbone):
            raise ValueError("n_threads is fixed at load on llama.cpp's backbone")
        backbone.n_threads = value

    @property
    def has_river(self) -> bool:
        return self.backbone.has_river

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
        return getattr(self._backbone, "prefill", DEFAULT_PREFILL)

    def check_policy(self, policy: ExitPolicy) -> None:
        """TypeError / ValueError unless `policy` applies to this model."""
        self.backbone.check_policy(policy)

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
        if policy is not None:
            self.check_policy(policy)  # the backbone's own message (llama.cpp's names the architecture)
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

    @property
    def last_exit_layers(self) -> np.ndarray:
        """Backbone layers each token of the last forward ran (n_layer: never left)."""
        return self.backbone.last_exit_layers

    def exit_stats(self, exit_layers: Sequence[int]) -> ExitStats:
        """Summary of a per-token exit record of this model."""
        return ExitStats.from_exit_layers(exit_layers, self.n_layer)

    @property
    def tokenizer(self) -> Tokenizer:
        return self._backbone.tokenizer

    # ---------------------------------------------------------------- text

    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of `text` (llama.cpp's tokenizer for this GGUF)."""
        self._check_open()
        return self.tokenizer.tokenize(text, add_bos=add_bos, special=special)

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of `ids`; invalid UTF-8 is replaced."""
        self._check_open()
        return self.tokenizer.detokenize(ids)

    # ---------------------------------------------------------------- compute

    def reset(self) -> None:
        """Forget the sequence: the next forward starts at position 0."""
        with self._lock:
            self.backbone.reset()

    def rewind(self, n_past: int) -> None:
        """Shorten the cached sequence to its first `n_past` positions."""
        with self._lock:
            self.backbone.rewind(n_past)

    @property
    def cached_ids(self) -> list[int]:
        """The token ids the cache holds, position by position."""
        return self.backbone.cached_ids

    def cached_prefix(self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None) -> int:
        """How many leading `ids` the cache holds as a cold forward of them on `route`
        (under `policy`, default the model's) computes them (the prompt cache), at
        most len(ids) - 1."""
        return self.backbone.cached_prefix(ids, route=route, policy=self.policy if policy is None else policy)

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
        """Append `ids` to the sequence and return their logits.

        Returns float32 of shape [len(ids), n_vocab], or [1, n_vocab] for the last
        position only when `last_only` (what generation needs). `route` picks the
        weights (river_cpp.engine.backbone.ROUTES): by default a multi-token forward
        is a prompt (the full backbone unless prefill="exit") and one token a decode
        step (the exit policy). With an exit, the batch leaves at one depth; see
        last_exit_layers. `policy`: the exit policy of this forward (None: the
        model's). `exit_vocab`: exited tokens score only token ids [0, exit_vocab)
        (their other logits are -inf; None: all). `prompt`: the ids are a prompt,
        prefilled alike by every decoding, so its rows may take faster kernels than
        exact rows (see `exact`). Raises RiverError when an RPC server holding part of
        the model went away (and from then on).
        """
        with self._lock:
            return self.backbone.forward(
                ids,
                last_only=last_only,
                route=route,
                policy=self.policy if policy is None else policy,
                exit_vocab=exit_vocab,
                prompt=prompt,
            )

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
                self._keep_in_prompt_cache()
        return stream.result

    def _keep_in_prompt_cache(self) -> None:
        """Save the sequence the backbone holds after a generation into the prompt cache."""
        cache = None if self._backbone.closed else self._backbone.prompt_cache
        if cache is not None:
            try:
                cache.save(self._backbone)
            except (_core.RiverError, OSError, ValueError) as error:  # a cache never fails a request
                warnings.warn(f"prompt cache: the sequence was not saved: {error}", RuntimeWarning, stacklevel=2)

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
