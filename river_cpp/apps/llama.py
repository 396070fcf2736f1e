"""river_cpp.Llama: llama-cpp-python's `Llama` on river-cpp's engine, for a one-line switch.

    from river_cpp import Llama          # was: from llama_cpp import Llama
    llm = Llama(model_path="model.gguf", n_ctx=2048)
    llm("Q: Name the planets. A:", max_tokens=32, stop=["Q:"], echo=True)

The calls take llama-cpp-python's arguments and defaults and return its dicts (with
river-cpp's `river` block and cached-token count added to `usage`); decoding is
RiverModel's, exact by default: drafts verified by the backbone, the tokens plain
decoding gives, greedy token for token and sampled with the same seed. Sampled
output draws from river-cpp's own seeded generator, so a seed gives river-cpp's
reproducible draw, not llama.cpp's. Every argument llama-cpp-python takes is either
served or refused with an error naming it (REFUSED says why); none is ignored.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from river_cpp.engine.model import RiverModel

# llama_cpp.LLAMA_DEFAULT_SEED: "a fresh random seed"
LLAMA_DEFAULT_SEED = 0xFFFFFFFF

# Constructor arguments of llama_cpp.Llama that river-cpp's engine cannot serve, with
# llama-cpp-python's default (which is accepted, as not asking for anything) and why.
REFUSED: dict[str, tuple[Any, str]] = {
    "split_mode": (1, "the placement of layers is river-cpp's own (n_gpu_layers, main_gpu)"),
    "tensor_split": (None, "the placement of layers is river-cpp's own (n_gpu_layers, main_gpu)"),
    "vocab_only": (False, "use river_cpp.engine.tokenizer.Tokenizer for a vocabulary alone"),
    "use_mlock": (False, "river-cpp does not lock model memory"),
    "kv_overrides": (None, "GGUF metadata overrides are not supported"),
    "rope_scaling_type": (-1, "RoPE scaling is read from the GGUF only"),
    "pooling_type": (-1, "embeddings are not supported"),
    "attention_type": (-1, "embeddings are not supported"),
    "rope_freq_base": (0.0, "RoPE scaling is read from the GGUF only"),
    "rope_freq_scale": (0.0, "RoPE scaling is read from the GGUF only"),
    "yarn_ext_factor": (-1.0, "YaRN settings are read from the GGUF only"),
    "yarn_attn_factor": (1.0, "YaRN settings are read from the GGUF only"),
    "yarn_beta_fast": (32.0, "YaRN settings are read from the GGUF only"),
    "yarn_beta_slow": (1.0, "YaRN settings are read from the GGUF only"),
    "yarn_orig_ctx": (0, "YaRN settings are read from the GGUF only"),
    "embedding": (False, "embeddings are not supported"),
    "offload_kqv": (True, "the KV cache's placement is river-cpp's own"),
    "flash_attn": (False, "river-cpp's attention kernels are its own"),
    "op_offload": (None, "river-cpp's placement is its own"),
    "swa_full": (None, "river-cpp sizes its own KV cache"),
    "lora_base": (None, "LoRA adapters are not supported"),
    "lora_scale": (1.0, "LoRA adapters are not supported"),
    "lora_path": (None, "LoRA adapters are not supported"),
    "numa": (False, "NUMA placement is not supported"),
    "chat_handler": (None, "chats render the GGUF's own template (chat_format=None)"),
    "draft_model": (None, "river-cpp drafts itself: pass speculative=river_cpp.Speculative(...)"),
    "tokenizer": (None, "the GGUF's own tokenizer is always used"),
    "type_k": (None, "the KV cache's type is river-cpp's own"),
    "type_v": (None, "the KV cache's type is river-cpp's own"),
    "spm_infill": (False, "infill prompts are not supported"),
}
# Arguments that only size llama.cpp's work (output never depends on them): accepted,
# as river-cpp sizes its own batches and keeps every position's logits it needs.
_SIZING_ONLY = ("n_batch", "n_ubatch", "n_threads_batch", "logits_all", "no_perf")
# Sampling arguments llama-cpp-python takes that this cannot serve, with their
# neutral value and why.
REFUSED_SAMPLING: dict[str, tuple[Any, str]] = {
    "tfs_z": (1.0, "tail-free sampling left llama.cpp (llama-cpp-python ignores it)"),
    "mirostat_mode": (0, "mirostat sampling is not supported"),
    "mirostat_tau": (5.0, "mirostat sampling is not supported"),
    "mirostat_eta": (0.1, "mirostat sampling is not supported"),
    "stopping_criteria": (None, "Python stopping criteria are not supported: use stop strings"),
    "logits_processor": (None, "Python logits processors are not supported: use logit_bias or grammar"),
}


def _refuse(name: str, value: Any, table: Mapping[str, tuple[Any, str]]) -> None:
    default, why = table[name]
    if value is not default and value != default:
        raise ValueError(f"river_cpp.Llama cannot serve {name}={value!r}: {why}")


@dataclass
class LlamaState:
    """What save_state() keeps: the token sequence and seed. load_state() recomputes
    the KV cache of the tokens (the engine does not serialize its cache)."""

    input_ids: np.ndarray
    n_tokens: int
    seed: int


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
        verbose: bool = True,
        **options: Any,
    ) -> None:
        """llama-cpp-python's arguments (n_ctx 0: the model's training context is not
        supported, give a size), plus RiverModel's own as keywords (river, policy,
        speculative, prefill, progress, ...). Others of llama-cpp-python's are refused
        unless they keep their default (REFUSED)."""
        for name in list(options):
            if name in REFUSED:
                _refuse(name, options.pop(name), REFUSED)
            elif name in _SIZING_ONLY:
                options.pop(name)
        if chat_format not in (None, "chat_template.default"):
            raise ValueError(
                f"river_cpp.Llama cannot serve chat_format={chat_format!r}: chats render the GGUF's own "
                "chat template (chat_format=None)"
            )
        if n_ctx == 0:
            raise ValueError("river_cpp.Llama cannot serve n_ctx=0 (the model's training context): give a size")
        if isinstance(rpc_servers, str):
            rpc_servers = [s.strip() for s in rpc_servers.split(",") if s.strip()]
        self.chat_format = "chat_template.default"
        self.last_n_tokens_size = last_n_tokens_size
        self._seed = seed
        options.setdefault("progress", verbose)
        self._model = RiverModel(
            model_path,
            n_ctx=n_ctx,
            n_threads=n_threads,
            verbose=verbose,
            use_mmap=use_mmap,
            n_gpu_layers=n_gpu_layers,
            main_gpu=main_gpu,
            rpc_servers=rpc_servers or (),
            **options,
        )
        self.model_path = self._model.model_path
        self.verbose = verbose

    @classmethod
    def from_pretrained(
        cls, repo_id: str, filename: Optional[str] = None, *, cache_dir: Any = None, **kwargs: Any
    ) -> Llama:
        """Load a GGUF from a Hugging Face repository (`filename` may be a glob); needs
        the `[hf]` extra; see river_cpp.apps.hub."""
        from river_cpp.apps.hub import download

        return cls(download(repo_id, filename, cache_dir=cache_dir), **kwargs)

    @property
    def river_model(self) -> RiverModel:
        """The RiverModel underneath (its generate(), exit statistics, ...)."""
        return self._model

    def close(self) -> None:
        self._model.close()

    def __enter__(self) -> Llama:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- vocabulary and sizes

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of UTF-8 `text` (bytes, as llama-cpp-python takes)."""
        if not isinstance(text, bytes):
            raise TypeError(f"text must be bytes (UTF-8), as in llama-cpp-python; got {type(text).__name__}")
        self._model._check_open()
        return self._model.tokenizer.tokenize(text, add_bos=add_bos, special=special)

    def detokenize(
        self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None, special: bool = False
    ) -> bytes:
        """The bytes of `tokens`; with `prev_tokens`, as they continue those."""
        self._model._check_open()
        tokenizer = self._model.tokenizer
        if prev_tokens is None:
            return tokenizer.detokenize_bytes(tokens, special=special)
        before = tokenizer.detokenize_bytes(prev_tokens, special=special)
        return tokenizer.detokenize_bytes([*prev_tokens, *tokens], special=special)[len(before) :]

    def token_bos(self) -> int:
        return self._model.tokenizer.bos_id

    def token_eos(self) -> int:
        return self._model.tokenizer.eos_id

    def token_nl(self) -> int:
        return self._model.tokenizer.nl_id

    def n_ctx(self) -> int:
        return self._model.n_ctx

    def n_vocab(self) -> int:
        return self._model.n_vocab

    def n_embd(self) -> int:
        return self._model.engine.n_embd

    @property
    def n_tokens(self) -> int:
        """Positions in the KV cache."""
        return self._model.n_past

    # ---------------------------------------------------------------- state

    def reset(self) -> None:
        """Forget the cached sequence."""
        self._model.reset()

    def set_seed(self, seed: int) -> None:
        """The seed of calls that give none (LLAMA_DEFAULT_SEED: a fresh one each call)."""
        self._seed = seed

    def save_state(self) -> LlamaState:
        """The cached token sequence and the seed."""
        ids = np.array(self._model._cached_ids, dtype=np.intc)
        return LlamaState(input_ids=ids, n_tokens=int(ids.size), seed=self._seed)

    def load_state(self, state: LlamaState) -> None:
        """Bring the cache to `state`'s tokens (recomputed by the backbone) and its seed."""
        ids = [int(t) for t in np.asarray(state.input_ids)[: state.n_tokens]]
        self._model.reset()
        if ids:
            self._model.forward(ids, last_only=True, route="backbone")
        self._seed = state.seed

    # ---------------------------------------------------------------- completions

    def _sampling(self, seed: Optional[int], sampling: Mapping[str, Any]) -> dict[str, Any]:
        """A call's sampling options in river-cpp's names (refused ones checked)."""
        options = dict(sampling)
        for name in REFUSED_SAMPLING:
            _refuse(name, options.pop(name, REFUSED_SAMPLING[name][0]), REFUSED_SAMPLING)
        if seed is None and self._seed != LLAMA_DEFAULT_SEED:
            seed = self._seed
        options["seed"] = seed
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
        model: Optional[str] = None,
        grammar: Any = None,
        logit_bias: Optional[Mapping[Any, float]] = None,
        **options: Any,
    ) -> Union[dict[str, Any], Iterator[dict[str, Any]]]:
        """llama-cpp-python's create_completion. `echo` puts the prompt before the text;
        `suffix` is appended after it (llama-cpp-python's rule for a model without
        infill tokens). River options (policy, speculative, cancel) pass through;
        tfs_z, mirostat_*, stopping_criteria and logits_processor are refused unless
        neutral."""
        if echo and logprobs is not None:
            raise ValueError("river_cpp.Llama cannot serve echo with logprobs: the prompt's logprobs are not computed")
        if suffix is not None and not isinstance(suffix, str):
            raise ValueError(f"suffix must be a string, got {type(suffix).__name__}")
        sampling_names = ("tfs_z", "mirostat_mode", "mirostat_tau", "mirostat_eta", "stopping_criteria")
        sampling = {name: options.pop(name) for name in (*sampling_names, "logits_processor") if name in options}
        sampling.update(
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
        )
        result = self._model.create_completion(
            prompt,
            max_tokens=max_tokens,
            logprobs=logprobs,
            stream=stream,
            model_name=model,
            grammar=grammar,
            **options,
            **self._sampling(seed, sampling),
        )
        echoed = prompt if isinstance(prompt, str) else self.detokenize(prompt).decode("utf-8", errors="ignore")
        if stream:
            return _framed_chunks(result, echoed if echo else "", suffix or "")
        choice = result["choices"][0]
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
        model: Optional[str] = None,
        grammar: Any = None,
        logit_bias: Optional[Mapping[Any, float]] = None,
        logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None,
        **options: Any,
    ) -> Union[dict[str, Any], Iterator[dict[str, Any]]]:
        """llama-cpp-python's create_chat_completion, on the GGUF's own chat template
        (Jinja2, as llama-cpp-python renders it). tools / tool_choice (and the older
        functions / function_call) give OpenAI tool_calls; response_format and grammar
        constrain the reply (river_cpp.apps.completions.create_chat_completion)."""
        if functions is not None and tools is None:
            tools = [{"type": "function", "function": f} for f in functions]
        if function_call is not None and tool_choice is None:
            tool_choice = (
                function_call
                if isinstance(function_call, str)
                else {"type": "function", "function": {"name": function_call.get("name")}}
            )
        sampling = {
            name: options.pop(name)
            for name in ("tfs_z", "mirostat_mode", "mirostat_tau", "mirostat_eta", "logits_processor")
            if name in options
        }
        sampling.update(
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
        )
        return self._model.create_chat_completion(
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
            **options,
            **self._sampling(seed, sampling),
        )


def _framed_chunks(chunks: Iterator[dict[str, Any]], before: str, after: str) -> Iterator[dict[str, Any]]:
    """A completion stream with `before` in its first text chunk and `after` in its last."""
    first = True
    for chunk in chunks:
        choices = chunk.get("choices") or []
        if choices:
            if first:
                choices[0]["text"] = before + choices[0]["text"]
                first = False
            if choices[0].get("finish_reason") is not None:
                choices[0]["text"] += after
        yield chunk
