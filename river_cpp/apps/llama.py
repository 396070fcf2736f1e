"""river_cpp.Llama: llama-cpp-python's `Llama` on river-cpp's engine, for a one-line switch.

    from river_cpp import Llama          # was: from llama_cpp import Llama
    llm = Llama(model_path="model.gguf", n_ctx=2048)
    llm("Q: Name the planets. A:", max_tokens=32, stop=["Q:"], echo=True)

The calls take llama-cpp-python's arguments and defaults and return its dicts (with
river-cpp's `river` block and cached-token count added to `usage`); decoding is
RiverModel's, exact by default: drafts verified by the backbone, the tokens plain
decoding gives, greedy token for token and sampled with the same seed. Sampled
output draws from river-cpp's own seeded generator, so a seed gives river-cpp's
reproducible draw, not llama.cpp's; seeds follow llama-cpp-python 0.3.36's rule
(a call without one takes the next of a fixed sequence, so a script samples the
same on every run). Text is llama-cpp-python's from the same tokens: invalid UTF-8
dropped, streams cut into its chunks (river_cpp.completions.output_text). Every
keyword llama-cpp-python takes is served, accepted because it cannot change the
output (a warning, once per process, names those ignored), or refused with an
error naming it (river_cpp.apps.llama_compat's tables say why).
Embeddings run on llama.cpp's own context on the same file (river_cpp.apps.embeddings).
"""

from __future__ import annotations

import inspect
import os
import random
import warnings
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from river_cpp._cpus import default_n_threads
from river_cpp.apps import llama_compat as compat
from river_cpp.apps.embeddings import Embedder
from river_cpp.apps.llama_compat import LLAMA_DEFAULT_SEED, REFUSED, REFUSED_SAMPLING, LlamaTokenizer
from river_cpp.completions import create_chat_completion, create_completion
from river_cpp.decoding.sampling import Sampler, SamplingParams
from river_cpp.engine.backbone import common_prefix
from river_cpp.engine.gguf_info import read_gguf_info
from river_cpp.engine.tokenizer import Tokenizer
from river_cpp.model import RiverModel

__all__ = ["LLAMA_DEFAULT_SEED", "REFUSED", "REFUSED_SAMPLING", "Llama", "LlamaState", "LlamaTokenizer"]

# llama-cpp-python's own constructor keywords that river_cpp.Llama serves by name
# (the others are in llama_compat's tables).
_SERVED = (
    "model_path",
    "n_gpu_layers",
    "main_gpu",
    "use_mmap",
    "seed",
    "n_ctx",
    "n_threads",
    "last_n_tokens_size",
    "chat_format",
    "rpc_servers",
    "verbose",
    "embedding",
    "pooling_type",
    "rope_scaling_type",
    "rope_freq_base",
    "rope_freq_scale",
    "yarn_ext_factor",
    "yarn_attn_factor",
    "yarn_beta_fast",
    "yarn_beta_slow",
    "yarn_orig_ctx",
)
_ROPE = ("rope_scaling_type", "rope_freq_base", "rope_freq_scale", *(n for n in _SERVED if n.startswith("yarn_")))


@dataclass
class LlamaState:
    """What save_state() keeps: the token sequence and seed. load_state() recomputes
    the KV cache of the tokens (the engine does not serialize its cache)."""

    input_ids: np.ndarray
    n_tokens: int
    seed: int


def _river_options() -> frozenset[str]:
    """RiverModel's own keywords (river, policy, speculative, ...)."""
    return frozenset(inspect.signature(RiverModel.__init__).parameters) - {"self", "model_path"}


def _random_seed(seed: Optional[int]) -> bool:
    """Whether llama.cpp's sampler reads `seed` as "a fresh random seed" (None, -1,
    LLAMA_DEFAULT_SEED)."""
    return seed is None or seed == -1 or seed == LLAMA_DEFAULT_SEED


def _draw_seed(seed: Optional[int]) -> Optional[int]:
    """The seed river-cpp's sampler takes for llama-cpp-python's `seed` (None: fresh entropy)."""
    return None if _random_seed(seed) else seed


def _next_seed(seed: int) -> int:
    """The seed llama-cpp-python 0.3.36 gives a completion called without one, after
    `seed`: a number drawn by Python's random.Random(seed) (so the sequence is the same
    in every process: a script's "random" samples repeat from run to run)."""
    return random.Random(seed).randint(0, 2**32)


class Llama:
    """llama-cpp-python's Llama on river-cpp (see the module's docstring)."""

    def __init__(
        self,
        model_path: Union[str, os.PathLike],
        *,
        n_gpu_layers: int = 0,
        main_gpu: int = 0,
        use_mmap: bool = True,
        seed: int = LLAMA_DEFAULT_SEED,
        n_ctx: int = 512,
        n_threads: Optional[int] = None,
        last_n_tokens_size: int = 64,
        chat_format: Optional[str] = None,
        rpc_servers: Union[str, Sequence[str], None] = None,
        embedding: bool = False,
        pooling_type: int = -1,
        verbose: bool = True,
        **options: Any,
    ) -> None:
        """llama-cpp-python's arguments, plus RiverModel's own as keywords (river,
        policy, speculative, prefill, progress, ...).

        n_ctx=0: the GGUF's training context, capped so the KV cache fits in half the
        memory available (a warning says when). seed: as llama-cpp-python 0.3.36, each
        completion without a seed of its own takes the next of a sequence that starts
        from this seed (-1 and LLAMA_DEFAULT_SEED included), so a script gives the same
        samples on every run; a call's seed -1 draws fresh entropy. chat_format: None
        (the GGUF's template) or one of llama-cpp-python's names, served by the GGUF's
        template where it is of that family. embedding=True: embed() /
        create_embedding() on llama.cpp's context of the same file (pooling_type -1:
        the GGUF's pooling); the generating model then loads on first use. RoPE /
        YaRN settings are accepted when equal to the GGUF's. Keywords that only
        change speed or memory (n_batch, flash_attn, use_mlock, offload_kqv, type_k,
        ...) are accepted; a warning names those ignored, once per process (none at
        llama-cpp-python's default, nor n_parts, f16_kv, device, which it ignores
        too). Keywords that would change the output and cannot be served raise
        ValueError naming them."""
        # what __getstate__ gives pickle: the constructor's arguments, as llama-cpp-python's
        self._init_arguments = dict(
            model_path=os.fspath(model_path),
            n_gpu_layers=n_gpu_layers,
            main_gpu=main_gpu,
            use_mmap=use_mmap,
            seed=seed,
            n_ctx=n_ctx,
            n_threads=n_threads,
            last_n_tokens_size=last_n_tokens_size,
            chat_format=chat_format,
            rpc_servers=rpc_servers,
            embedding=embedding,
            pooling_type=pooling_type,
            verbose=verbose,
            **options,
        )
        self.verbose = verbose
        path = os.fspath(model_path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"model file not found: {path}")
        self._info = read_gguf_info(path)
        for name in list(options):
            if name in REFUSED:
                if name == "attention_type" and embedding:
                    continue
                compat.refuse(name, options.pop(name), REFUSED)
        compat.check_rope(self._info, {n: options.pop(n) for n in _ROPE if n in options})
        sizing = {n: options.pop(n, default) for n, default in compat.SIZING.items()}
        ignored = {n: options.pop(n) for n in list(options) if n in compat.IGNORED}
        for name in compat.UNUSED:
            options.pop(name, None)
        river_options = _river_options()
        unknown = [n for n in options if n not in river_options and n != "attention_type"]
        ignored.update((name, options.pop(name)) for name in unknown)
        compat.warn_ignored(ignored, unknown=unknown)
        attention_type = options.pop("attention_type", -1)
        if n_ctx == 0:
            n_ctx = compat.training_context(self._info, verbose=verbose)
        self._template_source = compat.chat_template_of(chat_format, self._info.get("tokenizer.chat_template"))
        self.chat_format = chat_format or "chat_template.default"
        if isinstance(rpc_servers, str):
            rpc_servers = [s.strip() for s in rpc_servers.split(",") if s.strip()]
        self.model_path = path
        self.last_n_tokens_size = last_n_tokens_size
        self._seed: Optional[int] = seed or LLAMA_DEFAULT_SEED  # as llama-cpp-python keeps it
        self.cache: Any = None
        self._logits_all = bool(sizing["logits_all"])
        self.n_batch = min(n_ctx, int(sizing["n_batch"]))
        options.setdefault("progress", verbose)
        self._model_options = dict(
            n_ctx=n_ctx,
            n_threads=n_threads,
            verbose=verbose,
            use_mmap=use_mmap,
            n_gpu_layers=n_gpu_layers,
            main_gpu=main_gpu,
            rpc_servers=rpc_servers or (),
            **options,
        )
        self._river: Optional[RiverModel] = None
        self._vocab_only: Optional[Tokenizer] = None
        self._embedder: Optional[Embedder] = None
        if embedding:
            self._embedder = Embedder(
                path,
                n_ctx=n_ctx,
                n_batch=self.n_batch,
                n_ubatch=min(self.n_batch, int(sizing["n_ubatch"])),
                n_threads=n_threads,
                pooling_type=pooling_type,
                attention_type=attention_type,
                use_mmap=use_mmap,
                n_gpu_layers=n_gpu_layers,
                verbose=verbose,
            )
            self._embedder.context  # noqa: B018 - open it now, as llama-cpp-python does
        else:
            self._load()
        rope_type, rope_base, rope_scale = compat.rope_settings(self._info)
        self.n_threads = self._river.n_threads if self._river is not None else (n_threads or default_n_threads())
        self.context_params = compat.ContextParams(
            n_ctx=n_ctx,
            n_batch=self.n_batch,
            n_ubatch=min(self.n_batch, int(sizing["n_ubatch"])),
            n_seq_max=1,
            n_threads=self.n_threads,
            n_threads_batch=int(sizing["n_threads_batch"] or self.n_threads),
            rope_scaling_type=rope_type,
            pooling_type=pooling_type,
            attention_type=attention_type,
            rope_freq_base=rope_base,
            rope_freq_scale=rope_scale,
            yarn_ext_factor=-1.0,
            yarn_attn_factor=1.0,
            yarn_beta_fast=32.0,
            yarn_beta_slow=1.0,
            yarn_orig_ctx=0,
            embeddings=bool(embedding),
            offload_kqv=True,
            flash_attn=False,
            no_perf=bool(sizing["no_perf"]),
            type_k=None,
            type_v=None,
        )
        self.model_params = compat.ModelParams(
            n_gpu_layers=n_gpu_layers,
            split_mode=compat.IGNORED["split_mode"][0],
            main_gpu=main_gpu,
            tensor_split=None,
            vocab_only=False,
            use_mmap=use_mmap,
            use_mlock=False,
            kv_overrides=None,
        )
        self.metadata: dict[str, str] = compat.metadata(self._info)
        self.tokenizer_ = LlamaTokenizer(self)
        self._logits: Optional[np.ndarray] = None  # the last eval()'s logits
        self._logits_at = -1  # n_tokens when they were computed

    def _load(self) -> RiverModel:
        if self._river is None:
            self._river = RiverModel(self.model_path, **self._model_options)
        return self._river

    @property
    def _model(self) -> RiverModel:
        """The generating model (loaded on first use after embedding=True)."""
        return self._river if self._river is not None else self._load()

    @classmethod
    def from_pretrained(
        cls, repo_id: str, filename: Optional[str] = None, *, cache_dir: Any = None, **kwargs: Any
    ) -> Llama:
        """Load a GGUF from a Hugging Face repository (`filename` may be a glob); needs
        the `[hf]` extra; see river_cpp.engine.hub."""
        from river_cpp.engine.hub import download

        return cls(download(repo_id, filename, cache_dir=cache_dir), **kwargs)

    @property
    def river_model(self) -> RiverModel:
        """The RiverModel underneath (its generate(), exit statistics, ...)."""
        return self._model

    def close(self) -> None:
        if self._river is not None:
            self._river.close()
        if self._embedder is not None:
            self._embedder.close()
        if self._vocab_only is not None:
            self._vocab_only.close()

    def __enter__(self) -> Llama:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- vocabulary and sizes

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of UTF-8 `text` (bytes, as llama-cpp-python takes)."""
        if not isinstance(text, bytes):
            raise TypeError(f"text must be bytes (UTF-8), as in llama-cpp-python; got {type(text).__name__}")
        return self._vocabulary.tokenize(text, add_bos=add_bos, special=special)

    def detokenize(
        self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None, special: bool = False
    ) -> bytes:
        """The bytes of `tokens`; with `prev_tokens`, as they continue those."""
        tokenizer = self._vocabulary
        if prev_tokens is None:
            return tokenizer.detokenize_bytes(tokens, special=special)
        before = tokenizer.detokenize_bytes(prev_tokens, special=special)
        return tokenizer.detokenize_bytes([*prev_tokens, *tokens], special=special)[len(before) :]

    def tokenizer(self) -> LlamaTokenizer:
        """llama-cpp-python's tokenizer object (encode / decode / tokenize / detokenize)."""
        return self.tokenizer_

    @property
    def _vocabulary(self) -> Tokenizer:
        """The GGUF's tokenizer: the generating model's, or (embedding=True, before
        any generation) a vocabulary-only load, so that tokenizing an embedding model
        does not load a generating one."""
        if self._river is not None:
            self._river._check_open()
            return self._river.tokenizer
        if self._vocab_only is None:
            self._vocab_only = Tokenizer(self.model_path)
        return self._vocab_only

    def token_bos(self) -> int:
        return self._vocabulary.bos_id

    def token_eos(self) -> int:
        return self._vocabulary.eos_id

    def token_nl(self) -> int:
        return self._vocabulary.nl_id

    def n_ctx(self) -> int:
        return self.context_params.n_ctx

    def n_vocab(self) -> int:
        return self._vocabulary.n_vocab

    def n_embd(self) -> int:
        return int(self._info.get(f"{self._info.arch}.embedding_length"))

    def pooling_type(self) -> int:
        """llama.cpp's pooling of the embeddings (embedding=True only)."""
        return self._need_embedder().pooling_type()

    @property
    def model(self) -> Any:
        """llama.cpp's model pointer of this GGUF's vocabulary (a vocabulary-only
        llama_model_p): for llama_cpp's vocabulary functions, as outlines calls
        llama_model_get_vocab(llm.model). It has no weights to compute with."""
        return self._vocabulary._model

    @property
    def n_tokens(self) -> int:
        """Positions in the KV cache."""
        return self._model.n_past if self._river is not None else 0

    @property
    def input_ids(self) -> np.ndarray:
        """The token ids in the KV cache (np.intc)."""
        if self._river is None:
            return np.zeros(0, dtype=np.intc)
        return np.array(self._river.cached_ids, dtype=np.intc)

    _input_ids = input_ids

    @property
    def scores(self) -> np.ndarray:
        """The logits of the last eval() ([positions, n_vocab]: all of its positions
        with logits_all=True, else the last)."""
        if self._logits is None:
            return np.zeros((0, self.n_vocab()), dtype=np.float32)
        return self._logits

    _scores = scores

    # ---------------------------------------------------------------- state

    def reset(self) -> None:
        """Forget the cached sequence."""
        self._model.reset()
        self._logits, self._logits_at = None, -1

    def set_seed(self, seed: int) -> None:
        """The seed eval/sample/generate draw with, and the one the next completion
        without a seed takes its own from (see __init__)."""
        self._seed = seed

    def set_cache(self, cache: Any) -> None:
        """llama-cpp-python's prompt cache slot: a llama_cpp.LlamaRAMCache or LlamaDiskCache
        (its capacity, its folder) or a river_cpp PromptCache becomes the model's prompt
        cache across requests (river_cpp.engine.prompt_cache); None removes it. Another
        object is kept as `cache` and not filled, with a warning."""
        from river_cpp.engine.prompt_cache import PromptCache, from_llama_cpp_cache

        if cache is None or isinstance(cache, PromptCache) or isinstance(getattr(cache, "capacity_bytes", None), int):
            if self._river is not None:
                self._river.prompt_cache = from_llama_cpp_cache(cache)
        else:
            warnings.warn(
                "river_cpp.Llama keeps its own prompt cache (the longest cached prefix of each prompt is "
                f"reused); the {type(cache).__name__} given to set_cache is kept but not filled",
                stacklevel=2,
            )
        self.cache = cache

    def save_state(self) -> LlamaState:
        """The cached token sequence and the seed."""
        ids = self.input_ids
        return LlamaState(input_ids=ids, n_tokens=int(ids.size), seed=self._seed)

    def load_state(self, state: LlamaState) -> None:
        """Bring the cache to `state`'s tokens (recomputed by the backbone) and its seed."""
        ids = [int(t) for t in np.asarray(state.input_ids)[: state.n_tokens]]
        self.reset()
        if ids:
            self._model.forward(ids, last_only=True, route="backbone")
        self.set_seed(state.seed)

    # ---------------------------------------------------------------- low level: eval, sample, generate

    def eval(self, tokens: Sequence[int]) -> None:
        """Append `tokens` to the cached sequence and compute their logits (the
        backbone's; `scores` holds them)."""
        tokens = [int(t) for t in tokens]
        if not tokens:
            return
        # Several tokens at once are a prompt (llama-cpp-python's generate evaluates the
        # prompt, then one token at a time): ggml's fastest kernels, as steps.prefill
        # takes; one token is a plain step, with the arithmetic verify rows match.
        logits = self._model.forward(tokens, last_only=not self._logits_all, route="backbone", prompt=len(tokens) > 1)
        self._logits, self._logits_at = np.asarray(logits, dtype=np.float32), self.n_tokens

    def sample(
        self,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        temp: float = 0.80,
        repeat_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_eta: float = 0.1,
        mirostat_tau: float = 5.0,
        penalize_nl: bool = True,
        logits_processor: Any = None,
        grammar: Any = None,
        idx: Optional[int] = None,
    ) -> int:
        """A token from the last eval()'s logits (position `idx` of the sequence with
        logits_all=True), as llama-cpp-python samples: logits processors first, then
        penalties (none here: a lone sample has no history), the grammar, top-k,
        typical, top-p, min-p and temperature (0: greedy; < 0: the raw distribution)."""
        for name, value in (("mirostat_mode", mirostat_mode), ("mirostat_tau", mirostat_tau)):
            compat.refuse(name, value, REFUSED_SAMPLING)
        compat.refuse("mirostat_eta", mirostat_eta, REFUSED_SAMPLING)
        sampler = Sampler(
            self._sample_params(
                top_k, top_p, min_p, typical_p, temp, repeat_penalty, frequency_penalty, presence_penalty
            )
        )
        state = self._grammar(grammar).start() if grammar is not None else None
        return self._sample_with(sampler, [], logits_processor, state, idx)

    def _sample_params(
        self,
        top_k: int,
        top_p: float,
        min_p: float,
        typical_p: float,
        temp: float,
        repeat_penalty: float,
        frequency_penalty: float,
        presence_penalty: float,
    ) -> SamplingParams:
        if temp < 0:  # llama.cpp's dist sampler alone: the unmodified distribution
            temp, top_k, top_p, min_p, typical_p = 1.0, 0, 1.0, 0.0, 1.0
        return SamplingParams(
            temperature=temp,
            top_k=max(int(top_k), 0),
            top_p=top_p,
            min_p=min_p,
            typical_p=typical_p,
            repeat_penalty=repeat_penalty,
            frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty,
            repeat_last_n=self.last_n_tokens_size,
            seed=_draw_seed(self._seed),
        )

    def _grammar(self, grammar: Any):
        from river_cpp.completions.structured import request_grammar

        return request_grammar(self._model, grammar=grammar)

    def _sample_with(
        self, sampler: Sampler, generated: Sequence[int], processors: Any, state: Any, idx: Optional[int]
    ) -> int:
        if self._logits is None or self._logits_at != self.n_tokens:
            raise RuntimeError("sample() needs the logits of an eval() of the current sequence: call eval() first")
        row = -1 if idx is None or not self._logits_all else idx - (self.n_tokens - self._logits.shape[0])
        logits = np.array(self._logits[row], dtype=np.float32)
        if processors is not None:
            ids = self.input_ids
            for processor in processors if isinstance(processors, (list, tuple)) else [processors]:
                out = processor(ids, logits)
                logits = logits if out is None else np.asarray(out, dtype=np.float32)
        token = sampler(logits, list(generated), state)
        if state is not None:
            state.accept(token)
        return token

    def generate(
        self,
        tokens: Sequence[int],
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        temp: float = 0.80,
        repeat_penalty: float = 1.0,
        reset: bool = True,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        penalize_nl: bool = True,
        logits_processor: Any = None,
        stopping_criteria: Any = None,
        grammar: Any = None,
    ) -> Iterator[int]:
        """Tokens continuing `tokens`, one per next(), until the caller stops (or the
        context is full), as llama-cpp-python's generate: with `reset`, the longest
        prefix of `tokens` already cached is reused; `send(ids)` adds ids after the
        token just yielded; a stopping criterion that fires ends it before that
        token. Plain decoding by the backbone (no drafts)."""
        for name, value in (("mirostat_mode", mirostat_mode), ("mirostat_tau", mirostat_tau)):
            compat.refuse(name, value, REFUSED_SAMPLING)
        compat.refuse("mirostat_eta", mirostat_eta, REFUSED_SAMPLING)
        params = self._sample_params(
            top_k, top_p, min_p, typical_p, temp, repeat_penalty, frequency_penalty, presence_penalty
        )
        return self._generate(list(tokens), params, reset, logits_processor, stopping_criteria, grammar)

    def _generate(
        self, tokens: list[int], params: SamplingParams, reset: bool, processors: Any, stopping: Any, grammar: Any
    ) -> Iterator[int]:
        sampler = Sampler(params)
        state = self._grammar(grammar).start() if grammar is not None else None
        cached = [int(t) for t in self.input_ids]
        if reset:
            keep = 0
            for a, b in zip(cached, tokens):
                if a != b:
                    break
                keep += 1
            keep = min(keep, len(tokens) - 1)  # at least one token is evaluated, for its logits
            if keep < len(cached):
                self._model.rewind(max(keep, 0))
            tokens = tokens[max(keep, 0) :]
        generated: list[int] = []
        while True:
            if self.n_tokens + len(tokens) > self.n_ctx():
                return
            self.eval(tokens)
            token = self._sample_with(sampler, generated, processors, state, None)
            if stopping is not None:
                criteria = stopping if isinstance(stopping, (list, tuple)) else [stopping]
                if any(bool(stop(self.input_ids, self._logits[-1])) for stop in criteria):
                    return
            generated.append(token)
            sent = yield token
            tokens = [token, *(sent or ())]

    # ---------------------------------------------------------------- embeddings

    def _need_embedder(self) -> Embedder:
        if self._embedder is None:
            raise RuntimeError("Llama model must be created with embedding=True to call this method")
        return self._embedder

    def embed(
        self, input: Union[str, list[str]], normalize: bool = False, truncate: bool = True, return_count: bool = False
    ) -> Any:
        """llama-cpp-python's embed (embedding=True): a vector per text, pooled as the
        GGUF says (a list of token vectors each when its pooling is none);
        normalize: unit length; truncate: to n_batch tokens."""
        return self._need_embedder().embed(input, normalize=normalize, truncate=truncate, return_count=return_count)

    def create_embedding(self, input: Union[str, list[str]], model: Optional[str] = None) -> dict[str, Any]:
        """OpenAI's embeddings response of `input` (embedding=True)."""
        return self._need_embedder().create_embedding(input, model=model if model is not None else self.model_path)

    # ---------------------------------------------------------------- completions

    def _sampling(self, seed: Optional[int], sampling: Mapping[str, Any]) -> dict[str, Any]:
        """A call's sampling options in river-cpp's names (refused ones checked)."""
        options = dict(sampling)
        for name in REFUSED_SAMPLING:
            compat.refuse(name, options.pop(name, REFUSED_SAMPLING[name][0]), REFUSED_SAMPLING)
        options.pop("tfs_z", None)  # tail-free sampling left llama.cpp; llama-cpp-python ignores it too
        # llama-cpp-python's rule: every completion sets the seed it draws with, its own
        # or the next in the sequence (greedy ones too, which draw nothing)
        self._seed = _next_seed(self._seed) if seed is None else seed
        options["seed"] = _draw_seed(self._seed)
        if options.get("top_k") is not None and options["top_k"] <= 0:
            options["top_k"] = 0  # llama.cpp: top-k off
        if options.get("temperature", 0) < 0:  # llama.cpp's dist sampler alone: the raw distribution
            options.update(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0)
        # llama-cpp-python penalizes the generated tokens only, its last last_n_tokens_size
        options["penalize_prompt"] = False
        options["repeat_last_n"] = self.last_n_tokens_size
        if options.get("stop") is None:
            options["stop"] = ()
        return options

    def create_completion(
        self,
        prompt: Union[str, list[int]],
        suffix: Optional[str] = None,
        max_tokens: Optional[int] = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: Optional[int] = None,
        echo: bool = False,
        stop: Union[str, list[str], None] = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: Optional[int] = None,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: Optional[str] = None,
        stopping_criteria: Any = None,
        logits_processor: Any = None,
        grammar: Any = None,
        logit_bias: Optional[Mapping[Any, float]] = None,
        **options: Any,
    ) -> Union[dict[str, Any], Iterator[dict[str, Any]]]:
        """llama-cpp-python's create_completion. `echo` puts the prompt before the text;
        `suffix` is appended after it (llama-cpp-python's rule for a model without
        infill tokens). logits_processor / stopping_criteria run on each step's
        logits (the call then decodes plainly; usage.river.plain_decoding says so).
        River options (policy, speculative, cancel) and `n` pass through;
        mirostat_* are refused unless neutral; tfs_z is ignored, as llama-cpp-python
        ignores it."""
        if echo and logprobs is not None:
            raise ValueError("river_cpp.Llama cannot serve echo with logprobs: the prompt's logprobs are not computed")
        if suffix is not None and not isinstance(suffix, str):
            raise ValueError(f"suffix must be a string, got {type(suffix).__name__}")
        sampling = dict(
            temperature=temperature,
            top_p=top_p,
            min_p=min_p,
            typical_p=typical_p,
            stop=stop,
            frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty,
            repeat_penalty=repeat_penalty,
            top_k=top_k,
            logit_bias=logit_bias,
            tfs_z=tfs_z,
            mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau,
            mirostat_eta=mirostat_eta,
        )
        result = create_completion(
            self._model,
            prompt,
            max_tokens=max_tokens,
            logprobs=logprobs,
            stream=stream,
            model_name=model,
            grammar=grammar,
            logits_processor=logits_processor,
            stopping_criteria=stopping_criteria,
            **options,
            **self._sampling(seed, sampling),
        )
        echoed = prompt if isinstance(prompt, str) else self.detokenize(prompt).decode("utf-8", errors="ignore")
        if stream:
            return _framed_chunks(result, echoed if echo else "", suffix or "")
        for choice in result["choices"]:
            choice["text"] = (echoed if echo else "") + choice["text"] + (suffix or "")
        return result

    def __call__(self, prompt: Union[str, list[int]], *args: Any, **kwargs: Any):
        """create_completion."""
        return self.create_completion(prompt, *args, **kwargs)

    def create_chat_completion(
        self,
        messages: Sequence[Mapping[str, Any]],
        functions: Optional[Sequence[Mapping[str, Any]]] = None,
        function_call: Any = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        tool_choice: Any = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        stream: bool = False,
        stop: Union[str, list[str], None] = None,
        seed: Optional[int] = None,
        response_format: Optional[Mapping[str, Any]] = None,
        max_tokens: Optional[int] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: Optional[str] = None,
        logits_processor: Any = None,
        grammar: Any = None,
        logit_bias: Optional[Mapping[Any, float]] = None,
        logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None,
        **options: Any,
    ) -> Union[dict[str, Any], Iterator[dict[str, Any]]]:
        """llama-cpp-python's create_chat_completion, on the GGUF's own chat template
        (Jinja2, as llama-cpp-python renders it) or the chat_format's. tools /
        tool_choice (and the older functions / function_call) give OpenAI tool_calls
        on any template: in the template's own call syntax where it has one, else a
        named or "required" choice makes the reply the call's JSON; response_format
        and grammar constrain the reply (river_cpp.completions.create_chat_completion)."""
        if not tools:  # llama-cpp-python reads an empty list as no tools (Haystack sends one)
            tools = None
        if functions is not None and tools is None:
            tools = [{"type": "function", "function": f} for f in functions]
        if function_call is not None and tool_choice is None:
            tool_choice = (
                function_call
                if isinstance(function_call, str)
                else {"type": "function", "function": {"name": function_call.get("name")}}
            )
        sampling = dict(
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            min_p=min_p,
            typical_p=typical_p,
            stop=stop,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            repeat_penalty=repeat_penalty,
            logit_bias=logit_bias,
            tfs_z=tfs_z,
            mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau,
            mirostat_eta=mirostat_eta,
        )
        return create_chat_completion(
            self._model,
            messages,
            max_tokens=max_tokens,
            stream=stream,
            logprobs=bool(logprobs),
            top_logprobs=top_logprobs if logprobs else None,
            model_name=model,
            grammar=grammar,
            response_format=response_format,
            tools=tools,
            tool_choice=tool_choice,
            template_engine="jinja",
            chat_template_source=self._template_source,
            logits_processor=logits_processor,
            **options,
            **self._sampling(seed, sampling),
        )

    def __getstate__(self) -> dict[str, Any]:
        """The constructor's arguments: a pickled Llama loads the file again (as
        llama-cpp-python's does), its cache empty."""
        return dict(self._init_arguments)

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        state = dict(state)
        self.__init__(state.pop("model_path"), **state)

    @staticmethod
    def logits_to_logprobs(logits: Any, axis: int = -1) -> np.ndarray:
        """log softmax of `logits` along `axis` (float32), as llama-cpp-python's."""
        logits = np.asarray(logits, dtype=np.float32)
        shifted = logits - np.max(logits, axis=axis, keepdims=True)
        with np.errstate(divide="ignore"):
            return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))

    @staticmethod
    def longest_token_prefix(a: Sequence[int], b: Sequence[int]) -> int:
        """How many leading tokens `a` and `b` share."""
        return common_prefix(a, b)

    def create_chat_completion_openai_v1(self, *args: Any, **kwargs: Any) -> Any:
        """create_chat_completion's answer as the openai package's ChatCompletion (or
        an iterator of ChatCompletionChunk with stream=True); needs `openai`."""
        try:
            from openai.types.chat import ChatCompletion, ChatCompletionChunk
        except ImportError:
            raise ImportError("create_chat_completion_openai_v1 needs the openai package: pip install openai") from None
        out = self.create_chat_completion(*args, **kwargs)
        if kwargs.get("stream", False):
            return (ChatCompletionChunk(**chunk) for chunk in out)
        return ChatCompletion(**out)


def _framed_chunks(chunks: Iterator[dict[str, Any]], before: str, after: str) -> Iterator[dict[str, Any]]:
    """A completion stream with `before` in each choice's first text chunk and
    `after` in its last."""
    started: set[int] = set()
    try:
        for chunk in chunks:
            for choice in chunk.get("choices") or []:
                if choice["index"] not in started:
                    choice["text"] = before + choice["text"]
                    started.add(choice["index"])
                if choice.get("finish_reason") is not None:
                    choice["text"] += after
            yield chunk
    finally:
        chunks.close()
