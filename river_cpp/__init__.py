"""river-cpp: GGUF language models with River-LLM seamless early exit, on ggml.

The package reads bottom-up in floors; a floor never imports one above it:

- engine: a GGUF backbone that turns ids into logits: river-cpp's graph with its river
  (the C++ `_core`), or llama.cpp's own context for the other architectures; the
  tokenizer, exit policies, building rivers, placing weights, reading GGUF headers;
- decoding: how a call turns logits into tokens (the generation loop, sampling,
  presets, drafts and their verification, the one decoding decision);
- model: RiverModel, the facade a user holds: a backbone, its decoding defaults, generation;
- apps: what users run (OpenAI-shaped completions, the chat, the CLI, the server,
  the Hub, the demo model, `info`);
- measure: speed and quality against the backbone and llama.cpp.

`import river_cpp` is cheap: the names below load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from river_cpp._cpus import wait_policy

# Before anything loads ggml's OpenMP runtime (llama_cpp, the engine's _core): how its
# threads wait at barriers, unless the environment says (river_cpp._cpus).
wait_policy()

# public name -> the module that defines it
_EXPORTS = {
    "ContextOverflowError": "river_cpp.engine.compute.context",
    "ExitPolicy": "river_cpp.engine.compute.policy",
    "ExitStats": "river_cpp.decoding.exit_stats",
    "GenerationChunk": "river_cpp.decoding.generation",
    "GenerationResult": "river_cpp.decoding.generation",
    "Llama": "river_cpp.apps.dropin.llama",
    "LoadOptions": "river_cpp.engine.compute.load_options",
    "RiverError": "river_cpp.engine._core",
    "RiverModel": "river_cpp.model",
    "SamplingParams": "river_cpp.decoding.sampling",
    "Speculative": "river_cpp.decoding.speculative_options",
    "SpeculativeStats": "river_cpp.decoding.speculative_stats",
    "system_info": "river_cpp.apps.info",
    "patch_llama_cpp": "river_cpp.apps.patch",
}

__all__ = [
    "ContextOverflowError",
    "ExitPolicy",
    "ExitStats",
    "GenerationChunk",
    "GenerationResult",
    "Llama",
    "LoadOptions",
    "RiverError",
    "RiverModel",
    "SamplingParams",
    "Speculative",
    "SpeculativeStats",
    "patch_llama_cpp",
    "system_info",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'river_cpp' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:  # for type checkers and editors: the same names, eagerly
    from river_cpp.apps.dropin.llama import Llama
    from river_cpp.apps.info import system_info
    from river_cpp.apps.patch import patch_llama_cpp
    from river_cpp.decoding.exit_stats import ExitStats
    from river_cpp.decoding.generation import GenerationChunk, GenerationResult
    from river_cpp.decoding.sampling import SamplingParams
    from river_cpp.decoding.speculative_options import Speculative
    from river_cpp.decoding.speculative_stats import SpeculativeStats
    from river_cpp.engine._core import RiverError
    from river_cpp.engine.compute.context import ContextOverflowError
    from river_cpp.engine.compute.load_options import LoadOptions
    from river_cpp.engine.compute.policy import ExitPolicy
    from river_cpp.model import RiverModel
