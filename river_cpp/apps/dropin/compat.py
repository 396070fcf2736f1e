"""What river_cpp.Llama takes from llama-cpp-python: its constructor's keywords and seeds.

Owns the keyword tables (served, accepted because they cannot change the output,
refused because they would and cannot be served), their sorting into the LoadOptions a
RiverModel loads with (sort_llama_keywords), the checks that need the GGUF's header
(RoPE settings, n_ctx=0, chat_format names) and llama-cpp-python's seed rules. It does
not load or run a model (river_cpp.apps.dropin.llama does), nor build the members frameworks
read (river_cpp.apps.dropin.members).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import random
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Union

from river_cpp.engine.compute.load_options import LoadOptions
from river_cpp.engine.files.gguf_info import GgufInfo
from river_cpp.model import RiverModel

# llama_cpp.LLAMA_DEFAULT_SEED: llama.cpp's "a fresh random seed" (llama-cpp-python's
# calls without a seed still draw theirs from a fixed sequence: river_cpp.apps.dropin.llama)
LLAMA_DEFAULT_SEED = 0xFFFFFFFF
# llama_cpp.LLAMA_ROPE_SCALING_TYPE_*: the GGUF's rope.scaling.type names by number
ROPE_SCALING_TYPES = {"none": 0, "linear": 1, "yarn": 2, "longrope": 3}

# Constructor keywords that size llama.cpp's work or place it, and never change the
# output: accepted; they are shown in context_params / model_params and otherwise
# left to river-cpp, which sizes and places its own work.
SIZING = {
    "n_batch": 512,
    "n_ubatch": 512,
    "n_threads_batch": None,
    "logits_all": False,
    "no_perf": False,
}
# Keywords accepted and ignored: they change speed or memory only. A value other than
# llama-cpp-python's default is named, with why, in a warning once per process.
IGNORED: dict[str, tuple[Any, str]] = {
    "split_mode": (1, "river-cpp places layers itself (n_gpu_layers, main_gpu)"),
    "tensor_split": (None, "river-cpp places layers itself (n_gpu_layers, main_gpu)"),
    "use_mlock": (False, "river-cpp does not lock model memory"),
    "offload_kqv": (True, "river-cpp places the KV cache itself"),
    "flash_attn": (
        False,
        "river-cpp's own attention (an online softmax over key tiles) runs on the CPU either way; "
        "RiverModel's own_attention=False asks for ggml's",
    ),
    "op_offload": (None, "river-cpp places its work itself"),
    "swa_full": (None, "river-cpp sizes its own KV cache"),
    "numa": (False, "river-cpp does no NUMA placement"),
    "draft_model": (None, "river-cpp drafts itself (speculative=river_cpp.Speculative(...))"),
    "vocab_only": (False, "the whole model is loaded"),
}
# Keywords llama-cpp-python 0.3.36 takes and ignores whatever their value (older ones
# LangChain still passes, LangChain's `device`): accepted silently, as there.
UNUSED = ("n_parts", "f16_kv", "device")
# Constructor keywords that would change the output and cannot be served: refused
# unless they keep llama-cpp-python's default (the RoPE and YaRN ones are also
# accepted when equal to the GGUF's own: see check_rope).
REFUSED: dict[str, tuple[Any, str]] = {
    "kv_overrides": (None, "GGUF metadata overrides are not supported"),
    "lora_base": (None, "LoRA adapters are not supported"),
    "lora_scale": (1.0, "LoRA adapters are not supported"),
    "lora_path": (None, "LoRA adapters are not supported"),
    "chat_handler": (None, "chats render the GGUF's template or a chat_format's"),
    "tokenizer": (None, "the GGUF's own tokenizer is always used"),
    "spm_infill": (False, "infill prompts are not supported"),
    "attention_type": (-1, "non-causal attention is served for embeddings only (embedding=True)"),
}
# Sampling arguments of the calls that would change the output and cannot be served.
REFUSED_SAMPLING: dict[str, tuple[Any, str]] = {
    "mirostat_mode": (0, "mirostat sampling is not supported"),
    "mirostat_tau": (5.0, "mirostat sampling is not supported"),
    "mirostat_eta": (0.1, "mirostat sampling is not supported"),
}


def refuse(name: str, value: Any, table: Mapping[str, tuple[Any, str]]) -> None:
    """ValueError naming `name` when `value` is not its neutral value in `table`."""
    default, why = table[name]
    if value is not default and value != default:
        raise ValueError(f"river_cpp.Llama cannot serve {name}={value!r}: {why}")


# The keywords this process has warned of: each is named once, not at every
# construction (a framework builds a Llama per chain, per request, ...).
_warned: set[str] = set()


def warn_once(name: str, message: str, *, stacklevel: int = 3) -> bool:
    """Warn `message` unless this process has warned of `name`; whether it warned."""
    if name in _warned:
        return False
    _warned.add(name)
    warnings.warn(message, stacklevel=stacklevel + 1)
    return True


def warn_ignored(options: Mapping[str, Any], *, unknown: Sequence[str] = ()) -> list[str]:
    """One warning naming each ignored keyword set to something other than its
    default (IGNORED) and each keyword neither llama-cpp-python nor river-cpp knows
    given a value other than None (llama-cpp-python ignores those silently), leaving
    out those this process has named already; the names warned of now."""
    named = [
        n
        for n, v in options.items()
        if n in IGNORED and n not in unknown and v is not IGNORED[n][0] and v != IGNORED[n][0]
    ]
    named += [n for n in unknown if options[n] is not None]
    named = [n for n in named if n not in _warned]
    why = {n: IGNORED[n][1] if n in IGNORED else "not a keyword river-cpp or llama-cpp-python uses" for n in named}
    if named:
        lines = [f"{n}={options[n]!r} ({why[n]})" for n in named]
        warnings.warn(
            "river_cpp.Llama ignores " + "; ".join(lines) + " (each keyword is named once per process)", stacklevel=3
        )
        _warned.update(named)
    return named


# ---------------------------------------------------------------- the GGUF's settings


def _meta(info: GgufInfo, key: str, default: Any = None) -> Any:
    return info.get(f"{info.arch}.{key}", default)


def rope_settings(info: GgufInfo) -> tuple[int, float, float]:
    """(rope_scaling_type, rope_freq_base, rope_freq_scale) of the GGUF."""
    scaling = str(_meta(info, "rope.scaling.type", "none"))
    factor = float(_meta(info, "rope.scaling.factor", 0.0) or 0.0)
    scale = 1.0 / factor if scaling != "none" and factor > 0 else 1.0
    return ROPE_SCALING_TYPES.get(scaling, -1), float(_meta(info, "rope.freq_base", 10000.0)), scale


# LangChain's LlamaCpp and ChatLlamaCpp always pass rope_freq_base=10000.0 (their default).
LANGCHAIN_ROPE_FREQ_BASE = 10000.0


def check_rope(info: GgufInfo, options: Mapping[str, Any]) -> None:
    """ValueError naming a RoPE or YaRN keyword that asks for other than the GGUF's
    own settings (0 / -1 / None: the GGUF's, as in llama-cpp-python). One exception:
    rope_freq_base=10000.0, LangChain's default on every model, keeps the GGUF's base
    with a warning once per process (llama-cpp-python applies it and changes the output)."""
    scaling_type, base, scale = rope_settings(info)
    wanted = {
        "rope_freq_base": (base, options.get("rope_freq_base", 0.0), (0.0, None)),
        "rope_freq_scale": (scale, options.get("rope_freq_scale", 0.0), (0.0, None)),
        "rope_scaling_type": (scaling_type, options.get("rope_scaling_type", -1), (-1, None)),
    }
    for name, (own, value, neutral) in wanted.items():
        if value in neutral:
            continue
        if not isinstance(value, (int, float)) or abs(float(value) - own) > 1e-6 * max(1.0, abs(own)):
            if name == "rope_freq_base" and value == LANGCHAIN_ROPE_FREQ_BASE:
                warn_once(
                    name,
                    f"river_cpp.Llama keeps the GGUF's rope_freq_base ({own!r}), not {value!r}: LangChain's "
                    "LlamaCpp / ChatLlamaCpp pass 10000.0 by default, which llama-cpp-python would apply "
                    "(changing the model's output); pass rope_freq_base=0 to silence this (named once per process)",
                )
                continue
            raise ValueError(
                f"river_cpp.Llama cannot serve {name}={value!r}: RoPE is the GGUF's own ({name} = {own!r} here)"
            )
    # With no scaling (freq_scale 1), YaRN's extrapolation mix and ramp change nothing; its
    # attention factor scales every rotation, so it must stay 1.
    yarn_neutral = {"yarn_ext_factor": -1.0, "yarn_beta_fast": 32.0, "yarn_beta_slow": 1.0, "yarn_orig_ctx": 0}
    for name, default in (*yarn_neutral.items(), ("yarn_attn_factor", 1.0)):
        value = options.get(name, default)
        if value == default or (scale == 1.0 and name != "yarn_attn_factor"):
            continue
        raise ValueError(f"river_cpp.Llama cannot serve {name}={value!r}: YaRN settings are the GGUF's own")


def training_context(info: GgufInfo, *, verbose: bool) -> int:
    """n_ctx=0: the GGUF's training context, capped so that the F16 KV cache takes at
    most half the memory available now (with a warning saying so)."""
    n_ctx_train = int(_meta(info, "context_length", 0) or 0)
    if n_ctx_train <= 0:
        raise ValueError("n_ctx=0 asks for the model's training context, but this GGUF does not give one")
    n_layer = int(_meta(info, "block_count"))
    n_head = int(_meta(info, "attention.head_count"))
    n_head_kv = _meta(info, "attention.head_count_kv", n_head)
    n_head_kv = max(n_head_kv) if isinstance(n_head_kv, list) else int(n_head_kv)
    head_k = int(_meta(info, "attention.key_length", int(_meta(info, "embedding_length")) // n_head))
    head_v = int(_meta(info, "attention.value_length", head_k))
    per_token = 2 * n_layer * n_head_kv * (head_k + head_v)  # F16 K and V
    available = _available_memory()
    if available is None or per_token * n_ctx_train <= available // 2:
        return n_ctx_train
    capped = max(512, int(available // 2 // per_token) // 256 * 256)
    if capped >= n_ctx_train:
        return n_ctx_train
    message = (
        f"n_ctx=0: the training context ({n_ctx_train} tokens) needs a "
        f"{per_token * n_ctx_train / 2**30:.1f} GiB KV cache, more than half of the "
        f"{available / 2**30:.1f} GiB available; using n_ctx={capped}"
    )
    warnings.warn(message, stacklevel=3)
    if verbose:
        print(f"river-cpp: {message}", file=sys.stderr)
    return capped


def _available_memory() -> Optional[int]:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


# ---------------------------------------------------------------- chat formats

# llama-cpp-python's chat_format names served through the GGUF's own template when it
# is of that family: the marker its template writes.
CHAT_FORMAT_MARKERS = {
    "chatml": "<|im_start|>",
    "qwen": "<|im_start|>",
    "chatml-function-calling": "<|im_start|>",
    "llama-3": "<|start_header_id|>",
    "llama-2": "[INST]",
    "mistral-instruct": "[INST]",
    "gemma": "<start_of_turn>",
    "zephyr": "<|assistant|>",
}
# The template rendered for chat_format "chatml" on a GGUF that has no chat template.
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def chat_template_of(chat_format: Optional[str], gguf_template: Optional[str]) -> Optional[str]:
    """The Jinja2 template a chat_format renders (None: the GGUF's own, the default).
    A llama-cpp-python format name is served by the GGUF's template when that is of
    the format's family, and "chatml" by a ChatML template on a GGUF without one;
    ValueError otherwise, naming the format."""
    if chat_format in (None, "chat_template.default"):
        return None
    if not isinstance(chat_format, str):
        raise ValueError(f"chat_format must be a string, got {chat_format!r}")
    marker = CHAT_FORMAT_MARKERS.get(chat_format)
    if marker is not None and gguf_template and marker in gguf_template:
        return None
    if chat_format in ("chatml", "qwen", "chatml-function-calling") and not gguf_template:
        return CHATML_TEMPLATE
    known = ", ".join(sorted(CHAT_FORMAT_MARKERS))
    raise ValueError(
        f"river_cpp.Llama cannot serve chat_format={chat_format!r} on this file: chats render the GGUF's own "
        f"template, and a chat_format is served where that template is of its family ({known}); "
        "leave chat_format=None to use the file's template"
    )


# ---------------------------------------------------------------- sorting a constructor's keywords

# RoPE and YaRN keywords: served where they ask for the GGUF's own settings (check_rope).
ROPE_KEYWORDS = (
    "rope_scaling_type",
    "rope_freq_base",
    "rope_freq_scale",
    "yarn_ext_factor",
    "yarn_attn_factor",
    "yarn_beta_fast",
    "yarn_beta_slow",
    "yarn_orig_ctx",
)
_LOAD_FIELDS = frozenset(f.name for f in dataclasses.fields(LoadOptions))


def _river_keywords() -> frozenset[str]:
    """The keywords river-cpp adds to llama-cpp-python's: LoadOptions' fields and
    RiverModel's own keyword-only ones (policy, speculative, prompt_cache), except the
    seed, which Llama keeps for itself."""
    parameters = inspect.signature(RiverModel.__init__).parameters.values()
    own = {p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY} - {"seed"}
    return _LOAD_FIELDS | own


@dataclass(frozen=True)
class LlamaKeywords:
    """A Llama constructor's keywords, sorted: how its RiverModel loads and RiverModel's
    other keywords; llama.cpp's sizing ones (SIZING, shown in context_params); the
    attention type of embeddings (llama.cpp's: -1, the GGUF's)."""

    load_options: LoadOptions
    model_keywords: Mapping[str, Any]
    sizing: Mapping[str, Any]
    attention_type: int


def sort_llama_keywords(
    info: GgufInfo,
    options: Mapping[str, Any],
    *,
    n_ctx: int,
    n_threads: Optional[int],
    use_mmap: bool,
    n_gpu_layers: int,
    main_gpu: int,
    rpc_servers: Union[str, Sequence[str], None],
    embedding: bool,
    verbose: bool,
) -> LlamaKeywords:
    """Sort a Llama constructor's keywords: `options` (those beyond its named
    parameters) and the named ones that reach LoadOptions. A refused keyword away from
    its neutral value raises ValueError naming it (attention_type is served with
    embedding=True); RoPE / YaRN keywords must ask for the GGUF's own (check_rope);
    the ignored ones, and those neither llama-cpp-python nor river-cpp knows, are named
    in one warning (warn_ignored); UNUSED ones are dropped silently. n_ctx=0 is the
    GGUF's training context (training_context); rpc_servers may be one comma-separated
    string; progress bars follow `verbose` unless `progress` is given."""
    options = dict(options)
    for name in list(options):
        if name in REFUSED and not (name == "attention_type" and embedding):
            refuse(name, options.pop(name), REFUSED)
    check_rope(info, {n: options.pop(n) for n in ROPE_KEYWORDS if n in options})
    sizing = {n: options.pop(n, default) for n, default in SIZING.items()}
    ignored = {n: options.pop(n) for n in list(options) if n in IGNORED}
    for name in UNUSED:
        options.pop(name, None)
    river_keywords = _river_keywords()
    unknown = [n for n in options if n not in river_keywords and n != "attention_type"]
    ignored.update((name, options.pop(name)) for name in unknown)
    warn_ignored(ignored, unknown=unknown)
    attention_type = options.pop("attention_type", -1)
    if n_ctx == 0:
        n_ctx = training_context(info, verbose=verbose)
    if isinstance(rpc_servers, str):
        rpc_servers = [s.strip() for s in rpc_servers.split(",") if s.strip()]
    model_keywords = {n: options.pop(n) for n in list(options) if n not in _LOAD_FIELDS}
    options.setdefault("progress", verbose)
    load_options = LoadOptions(
        n_ctx=n_ctx,
        n_threads=n_threads,
        use_mmap=use_mmap,
        n_gpu_layers=n_gpu_layers,
        main_gpu=main_gpu,
        rpc_servers=tuple(rpc_servers or ()),
        verbose=verbose,
        **options,
    )
    return LlamaKeywords(load_options, model_keywords, sizing, attention_type)


# ---------------------------------------------------------------- seeds


def draw_seed(seed: Optional[int]) -> Optional[int]:
    """The seed river-cpp's sampler takes for llama-cpp-python's `seed` (None: fresh
    entropy, where llama.cpp reads it as "a fresh random seed": None, -1, LLAMA_DEFAULT_SEED)."""
    return None if seed is None or seed == -1 or seed == LLAMA_DEFAULT_SEED else seed


def next_seed(seed: int) -> int:
    """The seed llama-cpp-python 0.3.36 gives a completion called without one, after
    `seed`: a number drawn by Python's random.Random(seed) (so the sequence is the same
    in every process: a script's "random" samples repeat from run to run)."""
    return random.Random(seed).randint(0, 2**32)
