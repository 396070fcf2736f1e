"""river-cpp: GGUF language models with River-LLM seamless early exit, on ggml."""

from river_cpp._ggml import check_llama_cpp_python

check_llama_cpp_python()

from river_cpp._core import RiverError  # noqa: E402
from river_cpp.context import ContextOverflowError  # noqa: E402
from river_cpp.exit_stats import ExitStats  # noqa: E402
from river_cpp.generation import GenerationChunk, GenerationResult  # noqa: E402
from river_cpp.info import system_info  # noqa: E402
from river_cpp.model import RiverModel  # noqa: E402
from river_cpp.policy import ExitPolicy  # noqa: E402
from river_cpp.sampling import SamplingParams  # noqa: E402
from river_cpp.speculative import Speculative, SpeculativeStats  # noqa: E402

__all__ = [
    "ContextOverflowError",
    "ExitPolicy",
    "ExitStats",
    "GenerationChunk",
    "GenerationResult",
    "RiverError",
    "RiverModel",
    "SamplingParams",
    "Speculative",
    "SpeculativeStats",
    "system_info",
]
__version__ = "0.1.0"
