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
error naming it (river_cpp.apps.dropin.compat's tables say why).
Embeddings run on llama.cpp's own context on the same file (river_cpp.apps.embeddings).

This module owns construction, the vocabulary, sizes and embeddings; the completions
are river_cpp.apps.dropin.completions', the low-level eval / sample / generate
river_cpp.apps.dropin.low_level's, the members frameworks read river_cpp.apps.dropin.members'.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from river_cpp.apps.dropin import compat, members
from river_cpp.apps.dropin.compat import LLAMA_DEFAULT_SEED, REFUSED, REFUSED_SAMPLING
from river_cpp.apps.dropin.completions import CompletionCalls
from river_cpp.apps.dropin.low_level import LowLevelCalls
from river_cpp.apps.dropin.members import LlamaState, LlamaTokenizer
from river_cpp.apps.embeddings import Embedder
from river_cpp.engine.compute.backbone import common_prefix
from river_cpp.engine.compute.tokenizer import Tokenizer
from river_cpp.engine.decisions.loading import check_model_path
from river_cpp.engine.files.gguf_info import read_gguf_info
from river_cpp.model import RiverModel

__all__ = ["LLAMA_DEFAULT_SEED", "REFUSED", "REFUSED_SAMPLING", "Llama", "LlamaState", "LlamaTokenizer"]


class Llama(CompletionCalls, LowLevelCalls):
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
        YaRN settings are accepted when equal to the GGUF's. type_k / type_v: the
        KV cache's types (LoadOptions: f16, or q8_0 as GGML_TYPE 8 or "q8_0").
        Keywords that only change speed or memory (n_batch, flash_attn, use_mlock,
        offload_kqv, ...) are accepted; a warning names those ignored, once per process (none at
        llama-cpp-python's default, nor n_parts, f16_kv, device, which it ignores
        too). Keywords that would change the output and cannot be served raise
        ValueError naming them."""
        # what __getstate__ gives pickle: the constructor's arguments, as llama-cpp-python's
        named = {n: v for n, v in locals().items() if n not in ("self", "options")}
        self._init_arguments = {**named, "model_path": os.fspath(model_path), **options}
        self.model_path = check_model_path(model_path)
        self.verbose = verbose
        self._info = read_gguf_info(self.model_path)
        keywords = compat.sort_llama_keywords(
            self._info,
            options,
            n_ctx=n_ctx,
            n_threads=n_threads,
            use_mmap=use_mmap,
            n_gpu_layers=n_gpu_layers,
            main_gpu=main_gpu,
            rpc_servers=rpc_servers,
            embedding=embedding,
            verbose=verbose,
        )
        self._load_options, self._model_keywords = keywords.load_options, keywords.model_keywords
        self._template_source = compat.chat_template_of(chat_format, self._info.get("tokenizer.chat_template"))
        self.chat_format = chat_format or "chat_template.default"
        self.last_n_tokens_size = last_n_tokens_size
        self._seed: Optional[int] = seed or LLAMA_DEFAULT_SEED  # as llama-cpp-python keeps it
        self.cache: Any = None
        self._logits_all = bool(keywords.sizing["logits_all"])
        self.n_threads = self._load_options.n_threads
        self.context_params = members.context_params(self._info, keywords, pooling_type, embedding=bool(embedding))
        self.n_batch = self.context_params.n_batch
        self.model_params = members.model_params(self._load_options)
        self.metadata: dict[str, str] = members.metadata(self._info)
        self.tokenizer_ = LlamaTokenizer(self)
        self._logits: Optional[np.ndarray] = None  # the last eval()'s logits
        self._logits_at = -1  # n_tokens when they were computed
        self._river: Optional[RiverModel] = None
        self._vocab_only: Optional[Tokenizer] = None
        self._embedder: Optional[Embedder] = None
        if embedding:
            self._embedder = self._open_embedder(n_threads)
        else:
            self._load()

    def _open_embedder(self, n_threads: Optional[int]) -> Embedder:
        """llama.cpp's embedding context on this file, opened now as llama-cpp-python's
        is (`n_threads` as given: llama-cpp-python's default where None)."""
        params = self.context_params
        embedder = Embedder(
            self.model_path,
            n_ctx=params.n_ctx,
            n_batch=params.n_batch,
            n_ubatch=params.n_ubatch,
            n_threads=n_threads,
            pooling_type=params.pooling_type,
            attention_type=params.attention_type,
            use_mmap=self._load_options.use_mmap,
            n_gpu_layers=self._load_options.n_gpu_layers,
            verbose=self.verbose,
        )
        embedder.context  # noqa: B018 - open it now, as llama-cpp-python does
        return embedder

    def _load(self) -> RiverModel:
        if self._river is None:
            self._river = RiverModel(self.model_path, self._load_options, **self._model_keywords)
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
        the `[hf]` extra; see river_cpp.engine.files.hub."""
        from river_cpp.engine.files.hub import download

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

    # ---------------------------------------------------------------- the prompt cache

    def set_cache(self, cache: Any) -> None:
        """llama-cpp-python's prompt cache slot: a llama_cpp.LlamaRAMCache or LlamaDiskCache
        (its capacity, its folder) or a river_cpp PromptCache becomes the model's prompt
        cache across requests (river_cpp.engine.compute.prompt_cache); None removes it. Another
        object is kept as `cache` and not filled, with a warning."""
        from river_cpp.engine.compute.prompt_cache import PromptCache, from_llama_cpp_cache

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

    # ---------------------------------------------------------------- pickling, helpers

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
