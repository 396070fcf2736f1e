"""Tiny random GGUFs of architectures river-cpp's graph does not build (phi3, qwen3moe,
olmo2, granite), written with gguf-py in the tensor layout llama.cpp loads for each, so
that the llama.cpp backbone is tested on real architecture code without a download.
Any other name gets llama's layout: UNLISTED, an architecture llama.cpp runs in that
layout but gguf-py's list of names (MODEL_ARCH_NAMES) lacks, and names llama.cpp does
not know at all."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
from gguf_files import add_fields, write_and_close

N_EMBD, N_HEAD, N_HEAD_KV, N_FF = 64, 4, 2, 128
HEAD_DIM = N_EMBD // N_HEAD
N_KV = HEAD_DIM * N_HEAD_KV
N_EXPERT, N_EXPERT_USED, N_FF_EXP = 4, 2, 64
ARCHITECTURES = ("phi3", "qwen3moe", "olmo2", "granite")
# llama.cpp (llama-cpp-python 0.3.36) loads nanbeige in llama's layout (src/models/nanbeige.cpp);
# gguf-py 0.19.0 does not name it.
UNLISTED = "nanbeige"


def write_foreign_gguf(path: Path, arch: str, tokenizer: list, *, n_layer: int = 2, seed: int = 0) -> Path:
    """A random-weight GGUF of `arch` (one of ARCHITECTURES, else in llama's layout) with
    the demo model's tokenizer."""
    rng = np.random.default_rng(seed)
    n_vocab = len(next(f for f in tokenizer if f.name == gguf.Keys.Tokenizer.LIST).data)

    def matrix(*shape: int, std: float = 0.3) -> np.ndarray:  # numpy order: rows last-but-one
        return rng.normal(0.0, std, shape).astype(np.float32)

    def norm(n: int = N_EMBD) -> np.ndarray:
        return (1.0 + rng.normal(0.0, 0.1, n)).astype(np.float32)

    writer = gguf.GGUFWriter(path, arch)
    writer.add_name("tiny random model")  # llama.cpp special-cases vocabularies by name ("phi3")
    writer.add_context_length(2048)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(HEAD_DIM)
    if arch == "qwen3moe":
        writer.add_expert_count(N_EXPERT)
        writer.add_expert_used_count(N_EXPERT_USED)
        writer.add_expert_feed_forward_length(N_FF_EXP)
    if arch == "granite":
        writer.add_logit_scale(2.0)
        writer.add_residual_scale(0.5)
        writer.add_embedding_scale(4.0)
        writer.add_attention_scale(1.0 / HEAD_DIM)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    add_fields(writer, tokenizer)

    tensors = {"token_embd.weight": matrix(n_vocab, N_EMBD, std=2.0)}
    for il in range(n_layer):
        blk = f"blk.{il}"
        if arch != "olmo2":  # OLMo 2 normalizes after each sublayer instead
            tensors[f"{blk}.attn_norm.weight"] = norm()
        if arch == "phi3":  # Phi-3 fuses Q, K and V
            tensors[f"{blk}.attn_qkv.weight"] = matrix(N_EMBD + 2 * N_KV, N_EMBD, std=0.1)
        else:
            tensors[f"{blk}.attn_q.weight"] = matrix(N_EMBD, N_EMBD, std=0.1)
            tensors[f"{blk}.attn_k.weight"] = matrix(N_KV, N_EMBD, std=0.1)
            tensors[f"{blk}.attn_v.weight"] = matrix(N_KV, N_EMBD)
        if arch == "qwen3moe":
            tensors[f"{blk}.attn_q_norm.weight"] = norm(HEAD_DIM)
            tensors[f"{blk}.attn_k_norm.weight"] = norm(HEAD_DIM)
        if arch == "olmo2":  # its q/k norms span all heads
            tensors[f"{blk}.attn_q_norm.weight"] = norm(N_EMBD)
            tensors[f"{blk}.attn_k_norm.weight"] = norm(N_KV)
        tensors[f"{blk}.attn_output.weight"] = matrix(N_EMBD, N_EMBD)
        if arch == "olmo2":
            tensors[f"{blk}.post_attention_norm.weight"] = norm()
        else:
            tensors[f"{blk}.ffn_norm.weight"] = norm()
        if arch == "phi3":  # gate and up in one matrix
            tensors[f"{blk}.ffn_up.weight"] = matrix(2 * N_FF, N_EMBD)
            tensors[f"{blk}.ffn_down.weight"] = matrix(N_EMBD, N_FF)
        elif arch == "qwen3moe":
            tensors[f"{blk}.ffn_gate_inp.weight"] = matrix(N_EXPERT, N_EMBD)
            tensors[f"{blk}.ffn_gate_exps.weight"] = matrix(N_EXPERT, N_FF_EXP, N_EMBD)
            tensors[f"{blk}.ffn_up_exps.weight"] = matrix(N_EXPERT, N_FF_EXP, N_EMBD)
            tensors[f"{blk}.ffn_down_exps.weight"] = matrix(N_EXPERT, N_EMBD, N_FF_EXP)
        else:
            tensors[f"{blk}.ffn_gate.weight"] = matrix(N_FF, N_EMBD)
            tensors[f"{blk}.ffn_up.weight"] = matrix(N_FF, N_EMBD)
            tensors[f"{blk}.ffn_down.weight"] = matrix(N_EMBD, N_FF)
        if arch == "olmo2":
            tensors[f"{blk}.post_ffw_norm.weight"] = norm()
    tensors["output_norm.weight"] = norm()
    tensors["output.weight"] = matrix(n_vocab, N_EMBD, std=1.0)
    for name, values in tensors.items():
        writer.add_tensor(name, values)
    write_and_close(writer)
    return path
