"""river_cpp.patch_llama_cpp(): frameworks that build llama_cpp.Llama themselves get river_cpp.Llama.

LangChain, LlamaIndex and Haystack construct `llama_cpp.Llama(model_path, ...)` inside
their own classes. Replacing the name in llama_cpp (and in the modules that already
took it with `from llama_cpp import Llama`) makes them build river_cpp.Llama instead,
with no change to their code:

    import river_cpp
    river_cpp.patch_llama_cpp()
    from langchain_community.llms import LlamaCpp   # now runs on river-cpp

This module only swaps names; it does not touch llama_cpp's functions or the
frameworks' classes.
"""

from __future__ import annotations

import sys
from typing import Any, Optional


class LlamaCppPatch:
    """A done patch: undo() (or leaving a `with` block) puts llama_cpp.Llama back."""

    def __init__(self, original: type, replaced: list[tuple[Any, str]]) -> None:
        self.original = original
        self._replaced = replaced

    def undo(self) -> None:
        """Put llama-cpp-python's Llama back wherever it was replaced."""
        for module, name in self._replaced:
            setattr(module, name, self.original)
        self._replaced = []

    def __enter__(self) -> LlamaCppPatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()


def original_llama() -> type:
    """llama-cpp-python's own Llama class, patched or not (llama_cpp.llama keeps it)."""
    import llama_cpp.llama

    return llama_cpp.llama.Llama


def patch_llama_cpp(replacement: Optional[type] = None) -> LlamaCppPatch:
    """Make `llama_cpp.Llama` river_cpp.Llama (or `replacement`): in llama_cpp and
    every module already imported that bound the name to llama-cpp-python's class
    (llama_cpp.llama keeps the original: original_llama()). river-cpp's own uses of
    llama.cpp (embeddings, its llama.cpp backbone) still get llama-cpp-python's class.
    Call it before the framework builds its model; it may be called again (a no-op for
    what is already replaced). Returns the patch (undo() reverts it; usable as a
    context manager)."""
    import llama_cpp
    import llama_cpp.llama

    from river_cpp.apps.dropin.llama import Llama

    replacement = Llama if replacement is None else replacement
    original = original_llama()
    replaced = []
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict) or module is llama_cpp.llama:
            continue
        for name, value in list(namespace.items()):
            if value is original:
                setattr(module, name, replacement)
                replaced.append((module, name))
    return LlamaCppPatch(original, replaced)
