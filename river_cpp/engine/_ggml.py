"""Loads the ggml that llama-cpp-python ships before our extension needs it.

river_cpp.engine._core links to the libggml in llama_cpp/lib; importing llama_cpp first
checks the pinned version and makes the libraries resident, so both share one ggml.
"""

from __future__ import annotations

import importlib.metadata

LLAMA_CPP_PYTHON_VERSION = "0.3.36"


def check_llama_cpp_python() -> None:
    """Raise ImportError unless the pinned llama-cpp-python is installed."""
    try:
        found = importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        raise ImportError(
            f"river-cpp needs llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} (it provides ggml); "
            f"install it with: pip install llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"
        ) from None
    if found != LLAMA_CPP_PYTHON_VERSION:
        raise ImportError(
            f"river-cpp was built against llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} but "
            f"{found} is installed; its ggml differs. Reinstall with: "
            f"pip install llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"
        )
    import llama_cpp  # noqa: F401  (loads libggml for river_cpp.engine._core)


def set_ggml_verbosity(verbose: bool) -> None:
    """Route ggml's and llama.cpp's log lines through llama-cpp-python's logger at its
    verbosity, as Llama(verbose=...) does: only errors unless verbose."""
    from llama_cpp import _logger

    _logger.set_verbose(verbose)
