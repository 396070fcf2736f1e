"""A hybrid GGUF for llama.cpp: layers < k from the backbone, >= k from a river.

What River with every token exiting at k must compute, expressed as a plain model
that llama.cpp runs with its own cache — the end-to-end check of the shared KV.
"""

from __future__ import annotations

from pathlib import Path

import gguf
from gguf_files import add_fields, write_and_close

INTERNAL_KEYS = ("GGUF.", "general.architecture")


def write_hybrid_gguf(backbone: Path, river: Path, k: int, out: Path) -> Path:
    src = gguf.GGUFReader(backbone)
    river_tensors = {t.name: t for t in gguf.GGUFReader(river).tensors}
    arch = src.get_field("general.architecture").contents()
    writer = gguf.GGUFWriter(out, arch)
    add_fields(writer, (f for f in src.fields.values() if not f.name.startswith(INTERNAL_KEYS)))
    for tensor in src.tensors:
        chosen = tensor
        if tensor.name.startswith("blk.") and int(tensor.name.split(".")[1]) >= k:
            chosen = river_tensors.get(tensor.name, tensor)  # norms stay the backbone's
        writer.add_tensor(chosen.name, chosen.data, raw_dtype=chosen.tensor_type)
    write_and_close(writer)
    return out
