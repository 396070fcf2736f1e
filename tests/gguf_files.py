"""Small gguf-py helpers shared by the fixtures that write GGUF files, and the tiny
llama the vocabulary tests and the fuzzers write."""

from __future__ import annotations

from typing import Iterable, Union

import gguf


def add_fields(writer: gguf.GGUFWriter, fields: Iterable[gguf.ReaderField]) -> None:
    """Copy metadata fields read by GGUFReader into `writer`, keeping their types."""
    for field in fields:
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), value_type, sub_type=sub_type)


def write_and_close(writer: gguf.GGUFWriter) -> None:
    """Header, metadata and tensors, in the order GGUF lays them out."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# The tiny llama that the vocabulary tests and the fuzzers (scripts/fuzz_gguf.py,
# scripts/fuzz_vocab.py) write: one or two layers, n_embd 32, random weights.
_N_EMBD, _N_FF, _N_HEAD, _N_HEAD_KV = 32, 64, 2, 1
_HEAD_DIM = _N_EMBD // _N_HEAD


def tiny_llama_hparams(n_layer: int) -> dict[str, Union[int, float]]:
    """Its llama.* metadata, by key without the architecture prefix (ints are UINT32,
    floats FLOAT32)."""
    return {
        "context_length": 64,
        "embedding_length": _N_EMBD,
        "block_count": n_layer,
        "feed_forward_length": _N_FF,
        "attention.head_count": _N_HEAD,
        "attention.head_count_kv": _N_HEAD_KV,
        "attention.layer_norm_rms_epsilon": 1e-5,
        "rope.freq_base": 10000.0,
        "rope.dimension_count": _HEAD_DIM,
    }


def tiny_llama_shapes(n_vocab: int, n_layer: int, *, output: bool = False) -> dict[str, tuple[int, ...]]:
    """Its tensors' numpy shapes ([rows, row length]) by GGUF name, in file order;
    output: an output.weight of its own (else the embedding is tied)."""
    kv = _HEAD_DIM * _N_HEAD_KV
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (n_vocab, _N_EMBD)}
    for il in range(n_layer):
        blk = f"blk.{il}"
        shapes[f"{blk}.attn_norm.weight"] = (_N_EMBD,)
        shapes[f"{blk}.attn_q.weight"] = (_N_EMBD, _N_EMBD)
        shapes[f"{blk}.attn_k.weight"] = (kv, _N_EMBD)
        shapes[f"{blk}.attn_v.weight"] = (kv, _N_EMBD)
        shapes[f"{blk}.attn_output.weight"] = (_N_EMBD, _N_EMBD)
        shapes[f"{blk}.ffn_norm.weight"] = (_N_EMBD,)
        shapes[f"{blk}.ffn_gate.weight"] = (_N_FF, _N_EMBD)
        shapes[f"{blk}.ffn_up.weight"] = (_N_FF, _N_EMBD)
        shapes[f"{blk}.ffn_down.weight"] = (_N_EMBD, _N_FF)
    shapes["output_norm.weight"] = (_N_EMBD,)
    if output:
        shapes["output.weight"] = (n_vocab, _N_EMBD)
    return shapes
