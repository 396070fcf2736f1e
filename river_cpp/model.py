"""RiverModel: the object a user holds, a facade over a backbone and decoding.

The backbone computes (river_cpp.engine: river-cpp's graph with its river, or llama.cpp's
own context for the architectures the graph does not build; river_cpp.engine.decisions.backbone_choice
decides which); this class adds the decoding defaults, text, argument checking, the lock
its calls serialize on, and the generation loop from river_cpp.decoding.generation.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from river_cpp.completions import create_chat_completion, create_completion
from river_cpp.decoding.decision import (
    Decoding,
    SpeculativeOption,
    check_alone,
    decide,
    preset_decoding,
    sampling_defaults,
)
from river_cpp.decoding.exit_stats import ExitStats
from river_cpp.decoding.generation import GenerationResult, GenerationStream, generation_requests
from river_cpp.decoding.presets import DEFAULT
from river_cpp.decoding.sampling import SamplingParams
from river_cpp.decoding.speculative import Speculative
from river_cpp.engine import _core
from river_cpp.engine.compute.graph_backbone import GraphBackbone
from river_cpp.engine.compute.llama_backbone import LlamaCppBackbone
from river_cpp.engine.compute.load_options import LoadOptions
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.engine.compute.prompt_cache import PromptCache, make_prompt_cache
from river_cpp.engine.compute.requests import Forward, Requests, call
from river_cpp.engine.compute.scheduler import Scheduler
from river_cpp.engine.compute.tokenizer import Tokenizer
from river_cpp.engine.decisions.loading import check_model_path, open_backbone

_SAMPLING_FIELDS = frozenset(f.name for f in dataclasses.fields(SamplingParams))


class RiverModel:
    """A GGUF language model run by river-cpp.

    >>> with RiverModel("model.gguf") as model:
    ...     print(model.generate("The capital of France is", max_tokens=8).text)
    """

    def __init__(
        self,
        model_path: Union[str, os.PathLike],
        options: Optional[LoadOptions] = None,
        *,
        policy: Optional[ExitPolicy] = None,
        speculative: SpeculativeOption = None,
        seed: Optional[int] = None,
        prompt_cache: Any = None,
        **load_options: Any,
    ) -> None:
        """Load a GGUF backbone and, unless the options' river is None, its river.

        options: how it loads (river_cpp.LoadOptions: n_ctx, n_threads, engine,
            river, river_types, river_head, prefill, tail_layers, progress, use_mmap,
            n_gpu_layers, main_gpu, rpc_servers, reuse_graphs, exact, own_attention,
            adapt_threads, verbose); `load_options` by keyword set or override its fields, e.g.
            RiverModel(path, n_ctx=4096, river=None). The default river, "auto", is the
            type that wins on this file, or none (`river_choice` says which and why).
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
        seed: the sampling seed of calls that name none (None: fresh entropy).
        prompt_cache: keep the KV states of earlier requests and reuse the longest
            cached prefix of each prompt (river_cpp.engine.compute.prompt_cache): None (default)
            or False: only the sequence the model holds; True: a PromptCache in RAM
            (2 GiB); an int: one of that many bytes; a folder: RAM and a disk tier there;
            or a PromptCache, which several models may share. Settable later.
        """
        options = LoadOptions(**load_options) if options is None else options.replace(**load_options)
        prompt_cache = make_prompt_cache(prompt_cache)  # a bad value fails before anything loads
        self.model_path = check_model_path(model_path)
        self.options = options
        self.verbose = options.verbose
        if policy is not None and not isinstance(policy, ExitPolicy):  # before anything loads
            raise TypeError(f"policy must be an ExitPolicy, got {type(policy).__name__}")
        exits = policy is not None and policy.exits()
        self._backbone, self.backbone_choice, self.river_choice = open_backbone(self.model_path, options, exits=exits)
        self.seed = seed
        n_seq = self._backbone.n_seq if isinstance(self._backbone, GraphBackbone) else 1
        if n_seq < options.n_seq_max:
            warnings.warn(
                f"'{self.backbone_choice.arch}' runs on llama.cpp's backbone, which serves one sequence at a "
                f"time here: n_seq_max={options.n_seq_max} is 1, and generations take turns",
                RuntimeWarning,
                stacklevel=2,
            )
        # The one loop over the sequences (river_cpp.engine.compute.scheduler): it leases them
        # to generations, from the first token until a stream is exhausted or closed,
        # and runs every forward and KV operation; the model's own calls run on it too,
        # on sequence 0. With one sequence, generations of other threads take turns,
        # and those read in turn on one thread take it over in turn.
        backbone = self._backbone
        views = [backbone.sequence(s) for s in range(n_seq)] if n_seq > 1 else [backbone]
        self._scheduler = Scheduler(views, rows=backbone if n_seq > 1 else None, on_end=self._keep_in_prompt_cache)
        if policy is not None:
            self._backbone.check_policy(policy)  # on llama.cpp's: names the architecture and what works
        self.prompt_cache = prompt_cache
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
    def seed(self) -> Optional[int]:
        """The sampling seed of calls that name none (None: fresh entropy); settable. Kept
        on the backbone, where the generation loop applies it (its one home:
        river_cpp.decoding.generation.generation_requests)."""
        return self._backbone.seed

    @seed.setter
    def seed(self, value: Optional[int]) -> None:
        self._backbone.seed = value

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
        """Free the weights, KV cache and tokenizer. Idempotent. Generations still open
        (streams not exhausted nor closed, on any thread) end: their next step raises
        ValueError; close waits only for the forwards running now (one each at most),
        never for a stream nobody reads. Returns at once when an RPC server of this
        model went away: what lived there is leaked, not freed on a dead connection."""
        self._scheduler.close()
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
        """Where the graph backbone's weights live (river_cpp.engine.compute.placement.Placement);
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

    @property
    def attention(self) -> str:
        """Which attention the model's layers run, and why ggml's where it runs: on the
        graph backbone river-cpp's own (batch-invariant) in every layer on the CPU over a
        cache in host memory, unless own_attention=False; llama.cpp's on its backbone."""
        backbone = self.backbone
        if isinstance(backbone, GraphBackbone):
            return backbone.describe_attention()
        return backbone.attention

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
        """Number of positions in the KV cache (sequence 0's, with several)."""
        return self.backbone.n_past

    @property
    def kv_bytes_per_sequence(self) -> Optional[int]:
        """Bytes of one sequence's KV cache (n_ctx positions, the river's rows among
        them); None on llama.cpp's backbone, which sizes its own."""
        backbone = self.backbone
        if not isinstance(backbone, GraphBackbone):
            return None
        return backbone.engine.placement_sizes()["kv_cache"] // backbone.n_seq

    @property
    def n_seq_max(self) -> int:
        """Sequences generations may run on at once (see LoadOptions.n_seq_max)."""
        return self._scheduler.n_seq

    @property
    def scheduler(self) -> Scheduler:
        """The loop that runs every generation's forwards and KV operations (read-only)."""
        return self._scheduler

    @property
    def learned_drafting(self) -> dict:
        """What decoding learned of drafting on this model (river_cpp.decoding.speculative)."""
        return self._backbone.learned_drafting

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
        return self.options.prefill

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
        self._call(call("reset"))

    def rewind(self, n_past: int) -> None:
        """Shorten the cached sequence to its first `n_past` positions."""
        self._call(call("rewind", n_past))

    @property
    def cached_ids(self) -> list[int]:
        """The token ids the cache holds, position by position."""
        return self.backbone.cached_ids

    def cached_prefix(self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None) -> int:
        """How many leading `ids` the cache, or the prompt cache, holds as a cold
        forward of them on `route` (under `policy`, default the model's) computes
        them, at most len(ids) - 1. A query: it waits for a running generation and
        changes nothing (a generation's result.cached_tokens says what it reused)."""
        return self._call(call("cached_prefix", ids, route=route, policy=self.policy if policy is None else policy))

    def reuse_prefix(self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None) -> int:
        """Bring the cache to the prefix cached_prefix finds, dropping the rest (a
        prefill's first move); its length."""
        return self._call(call("reuse_prefix", ids, route=route, policy=self.policy if policy is None else policy))

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
        weights (river_cpp.engine.compute.backbone.ROUTES): by default a multi-token forward
        is a prompt (the full backbone unless prefill="exit") and one token a decode
        step (the exit policy). With an exit, the batch leaves at one depth; see
        last_exit_layers. `policy`: the exit policy of this forward (None: the
        model's). `exit_vocab`: exited tokens score only token ids [0, exit_vocab)
        (their other logits are -inf; None: all). `prompt`: the ids are a prompt,
        prefilled alike by every decoding, so its rows may take faster kernels than
        exact rows (see `exact`). Raises RiverError when an RPC server holding part of
        the model went away (and from then on).
        """
        policy = self.policy if policy is None else policy
        return self._call(Forward(ids, last_only, route, policy, exit_vocab, prompt))

    def _call(self, request: Any) -> Any:
        """One request on sequence 0, run by the scheduler (a model call); its result."""
        self._check_open()
        return self._scheduler.call(_one(request))

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
        Holds a sequence of the model from its first token until it ends (a stream:
        until it is exhausted or closed), taken then (river_cpp.engine.compute.scheduler): a free
        one, waiting while every one is in another thread's generations. Generations on
        several threads run at once, their forwards batched together, each answer as it
        would be alone; with one sequence (n_seq_max=1, the default) they take turns.
        Streams read in turn on one thread never wait for each other: one that needs a
        sequence while every one is held by this thread's takes one over, and the stream
        that held it puts what it held back at its next step, so each answer is the one
        it gets alone. A call that names no seed samples with the model's.
        """
        sampling_options = {name: options.pop(name) for name in _SAMPLING_FIELDS & options.keys()}
        if decoding is None:
            decoding = self.decoding(policy=policy, speculative=speculative, sampling=sampling, **sampling_options)
        else:
            check_alone(policy, speculative, sampling, sampling_options)
        self._check_open()
        chunks = generation_requests(self._scheduler.model, prompt, decoding=decoding, **options)
        generation = GenerationStream(self._scheduler.start(chunks, None if isinstance(prompt, str) else prompt))
        if stream:
            return generation
        for _ in generation:
            pass
        return generation.result

    def _keep_in_prompt_cache(self, sequence: Any) -> None:
        """Save what a sequence holds after a generation into the prompt cache (the
        scheduler calls this as the generation ends, in its reader's context)."""
        cache = self._backbone.prompt_cache
        if cache is not None:
            try:
                cache.save(sequence)
            except (_core.RiverError, OSError, ValueError) as error:  # a cache never fails a request
                warnings.warn(f"prompt cache: the sequence was not saved: {error}", RuntimeWarning, stacklevel=2)

    def create_completion(self, prompt: Union[str, Sequence[int]], **options: Any):
        """An OpenAI-shaped text completion (llama-cpp-python's create_completion);
        see river_cpp.completions.create_completion."""
        return create_completion(self, prompt, **options)

    def create_chat_completion(self, messages: Sequence[Mapping[str, object]], **options: Any):
        """An OpenAI-shaped chat completion (llama-cpp-python's create_chat_completion);
        see river_cpp.completions.create_chat_completion."""
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
        RiverModel(). Needs the `[hf]` extra; see river_cpp.engine.files.hub.
        """
        from river_cpp.engine.files.hub import download

        return cls(download(repo_id, filename, revision=revision, cache_dir=cache_dir), **kwargs)


def _one(request: Any) -> Requests:
    """A loop that asks one request; its result."""
    return (yield request)
