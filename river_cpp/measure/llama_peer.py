"""llama.cpp as a peer: the rows measurement compares River against.

The peer is the engine's llama.cpp backbone (river_cpp.engine.compute.llama_backbone) with a
name and without a prompt cache: bench, eval and humaneval run their llama.cpp rows
through it with the same loop as River's (river_cpp.decoding.generation.generate_step),
the same tokenizer and RiverModel's settings: the same threads for batches and single
tokens, 512-token batches, no flash attention, and the CPU extra buffer types
river-cpp's probe allows. llama-cpp-python's own prompt lookup is set up here too.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Optional, Sequence, Union

from river_cpp._cpus import n_threads_or_default
from river_cpp.engine.compute import llama_backbone
from river_cpp.engine.compute.llama_backbone import LlamaCppBackbone
from river_cpp.engine.compute.policy import ExitPolicy

if TYPE_CHECKING:
    import llama_cpp

N_BATCH = llama_backbone.N_BATCH


def load_prompt_lookup(
    path: Union[str, os.PathLike], *, n_ctx: int, n_threads: int, max_draft: int, cpu_only: bool = False
) -> llama_cpp.Llama:
    """load_llama with llama-cpp-python's own prompt-lookup loop (LlamaPromptLookupDecoding,
    up to max_draft tokens a round): the peer the lossless and repeated-work benchmarks
    compare with."""
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    return llama_backbone.load_llama(  # through the module: the tests make it CPU-only there
        path,
        cpu_only=cpu_only,
        n_ctx=n_ctx,
        n_threads=n_threads,
        n_threads_batch=n_threads,
        n_batch=512,
        draft_model=LlamaPromptLookupDecoding(num_pred_tokens=max_draft),
        # its loop reads the scores of every drafted position: past n_batch tokens of
        # context a Llama without logits_all has no row for them
        logits_all=True,
        verbose=False,
    )


class LlamaCppPeer(LlamaCppBackbone):
    """A GGUF run by llama.cpp (llama-cpp-python), as a river_cpp Backbone that keeps no
    prompt cache: every prompt runs from an empty cache, as llama.cpp plain does."""

    def __init__(
        self,
        path: Union[str, os.PathLike],
        *,
        n_ctx: int = 2048,
        n_threads: Optional[int] = None,
        seed: Optional[int] = None,
        name: Optional[str] = None,
        n_gpu_layers: int = -1,
    ) -> None:
        super().__init__(
            path,
            n_ctx=n_ctx,
            n_threads=n_threads_or_default(n_threads),
            n_gpu_layers=n_gpu_layers,
        )
        self.name = name or f"llama.cpp {os.path.basename(os.fspath(path))}"
        self.seed = seed

    def cached_prefix(self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None) -> int:
        """No prompt cache: every prompt runs from an empty cache."""
        return 0

    def reuse_prefix(self, ids: Sequence[int], *, route: str = "prompt", policy: Optional[ExitPolicy] = None) -> int:
        """Every prompt runs from an empty cache."""
        self.reset()
        return 0

    def generate(self, prompt: Union[str, Sequence[int]], **options):
        """Generate a continuation of `prompt`; see river_cpp.decoding.generation.generate."""
        from river_cpp.decoding.generation import generate

        return generate(self, prompt, **options)
