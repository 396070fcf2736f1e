"""Tiny random GGUFs of architectures with a recurrent state (mamba, rwkv6) or a recurrent
state beside attention (granitehybrid: mamba2 layers and attention layers), written with
gguf-py in the tensor layout llama.cpp loads for each, so that the llama.cpp backbone's
rollback is tested on llama.cpp's recurrent memory without a download.

Shapes are in numpy order (the reverse of ggml's): a matrix of ggml {n_in, n_out} is
written as (n_out, n_in)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
from gguf_files import add_fields, write_and_close

ARCHITECTURES = ("mamba", "rwkv6", "granitehybrid")

N_EMBD, N_FF = 64, 128
D_INNER, D_STATE, D_CONV = 2 * N_EMBD, 16, 4  # llama.cpp supports an expansion factor of 2 only
DT_RANK = 4  # mamba: the rank of the time step's projection; mamba2: its number of heads
N_GROUP = 1  # mamba2's groups of B and C
WKV_HEAD, TIME_MIX_EXTRA, TIME_DECAY_EXTRA = 16, 8, 8  # rwkv6
N_HEAD, N_HEAD_KV = 4, 2  # granitehybrid's attention layers
HEAD_DIM = N_EMBD // N_HEAD


def write_recurrent_gguf(path: Path, arch: str, tokenizer: list, *, n_layer: int = 3, seed: int = 0) -> Path:
    """A random-weight GGUF of `arch` (one of ARCHITECTURES) with the demo model's
    tokenizer; granitehybrid's middle layer is attention, the others mamba2."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch must be one of {ARCHITECTURES}, got {arch!r}")
    rng = np.random.default_rng(seed)
    n_vocab = len(next(f for f in tokenizer if f.name == gguf.Keys.Tokenizer.LIST).data)

    def matrix(*shape: int, std: float = 0.3) -> np.ndarray:
        return rng.normal(0.0, std, shape).astype(np.float32)

    def norm(*shape: int) -> np.ndarray:
        return (1.0 + rng.normal(0.0, 0.1, shape or (N_EMBD,))).astype(np.float32)

    def small(*shape: int) -> np.ndarray:  # biases and mixing weights
        return rng.uniform(0.0, 0.5, shape).astype(np.float32)

    writer = gguf.GGUFWriter(path, arch)
    writer.add_name("tiny random model")
    writer.add_context_length(2048)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(n_layer)
    tensors = {"token_embd.weight": matrix(n_vocab, N_EMBD, std=2.0)}
    if arch == "mamba":
        _mamba_hparams(writer, n_groups=None)
        for il in range(n_layer):
            blk = f"blk.{il}"
            tensors[f"{blk}.attn_norm.weight"] = norm()
            tensors[f"{blk}.ssm_in.weight"] = matrix(2 * D_INNER, N_EMBD, std=0.1)
            tensors[f"{blk}.ssm_conv1d.weight"] = matrix(D_INNER, D_CONV)
            tensors[f"{blk}.ssm_conv1d.bias"] = small(D_INNER)
            tensors[f"{blk}.ssm_x.weight"] = matrix(DT_RANK + 2 * D_STATE, D_INNER, std=0.1)
            tensors[f"{blk}.ssm_dt.weight"] = matrix(D_INNER, DT_RANK)
            tensors[f"{blk}.ssm_dt.bias"] = small(D_INNER)
            tensors[f"{blk}.ssm_a"] = -np.exp(matrix(D_INNER, D_STATE))  # A = -exp(A_log) < 0
            tensors[f"{blk}.ssm_d"] = norm(D_INNER)
            tensors[f"{blk}.ssm_out.weight"] = matrix(N_EMBD, D_INNER, std=0.1)
    elif arch == "rwkv6":
        writer.add_feed_forward_length(N_FF)
        writer.add_head_count(0)
        writer.add_layer_norm_eps(1e-5)
        writer.add_wkv_head_size(WKV_HEAD)
        writer.add_time_mix_extra_dim(TIME_MIX_EXTRA)
        writer.add_time_decay_extra_dim(TIME_DECAY_EXTRA)
        writer.add_rescale_every_n_layers(6)
        writer.add_token_shift_count(2)
        tensors["token_embd_norm.weight"] = norm()
        tensors["token_embd_norm.bias"] = small(N_EMBD)
        for il in range(n_layer):
            blk = f"blk.{il}"
            for name in ("attn_norm", "attn_norm_2", "time_mix_ln"):
                tensors[f"{blk}.{name}.weight"] = norm()
                tensors[f"{blk}.{name}.bias"] = small(N_EMBD)
            tensors[f"{blk}.time_mix_w1.weight"] = matrix(5 * TIME_MIX_EXTRA, N_EMBD, std=0.1)
            tensors[f"{blk}.time_mix_w2.weight"] = matrix(5, N_EMBD, TIME_MIX_EXTRA, std=0.1)
            for name in ("x", "w", "k", "v", "r", "g"):
                tensors[f"{blk}.time_mix_lerp_{name}.weight"] = small(1, 1, N_EMBD)
            tensors[f"{blk}.time_mix_first.weight"] = matrix(N_EMBD // WKV_HEAD, WKV_HEAD)
            tensors[f"{blk}.time_mix_decay.weight"] = matrix(N_EMBD, std=0.5)
            tensors[f"{blk}.time_mix_decay_w1.weight"] = matrix(TIME_DECAY_EXTRA, N_EMBD, std=0.1)
            tensors[f"{blk}.time_mix_decay_w2.weight"] = matrix(N_EMBD, TIME_DECAY_EXTRA, std=0.1)
            for name in ("key", "value", "receptance", "gate", "output"):
                tensors[f"{blk}.time_mix_{name}.weight"] = matrix(N_EMBD, N_EMBD, std=0.15)
            tensors[f"{blk}.channel_mix_lerp_k.weight"] = small(1, 1, N_EMBD)
            tensors[f"{blk}.channel_mix_lerp_r.weight"] = small(1, 1, N_EMBD)
            tensors[f"{blk}.channel_mix_key.weight"] = matrix(N_FF, N_EMBD, std=0.15)
            tensors[f"{blk}.channel_mix_value.weight"] = matrix(N_EMBD, N_FF, std=0.15)
            tensors[f"{blk}.channel_mix_receptance.weight"] = matrix(N_EMBD, N_EMBD, std=0.15)
        tensors["output_norm.bias"] = small(N_EMBD)
    else:  # granitehybrid: a layer is attention where its head_count_kv is not 0
        attention = [il == n_layer // 2 for il in range(n_layer)]
        _mamba_hparams(writer, n_groups=N_GROUP)
        writer.add_feed_forward_length(N_FF)
        writer.add_head_count(N_HEAD)
        writer.add_head_count_kv([N_HEAD_KV if a else 0 for a in attention])
        writer.add_rope_freq_base(10000.0)
        writer.add_rope_dimension_count(HEAD_DIM)
        writer.add_logit_scale(2.0)
        writer.add_residual_scale(0.5)
        writer.add_embedding_scale(4.0)
        writer.add_attention_scale(1.0 / HEAD_DIM)
        n_conv = D_INNER + 2 * N_GROUP * D_STATE
        for il in range(n_layer):
            blk = f"blk.{il}"
            tensors[f"{blk}.attn_norm.weight"] = norm()
            if attention[il]:
                tensors[f"{blk}.attn_q.weight"] = matrix(N_EMBD, N_EMBD, std=0.1)
                tensors[f"{blk}.attn_k.weight"] = matrix(HEAD_DIM * N_HEAD_KV, N_EMBD, std=0.1)
                tensors[f"{blk}.attn_v.weight"] = matrix(HEAD_DIM * N_HEAD_KV, N_EMBD)
                tensors[f"{blk}.attn_output.weight"] = matrix(N_EMBD, N_EMBD)
            else:  # mamba2: in_proj gives z, x, B, C and the heads' time steps
                tensors[f"{blk}.ssm_in.weight"] = matrix(2 * D_INNER + 2 * N_GROUP * D_STATE + DT_RANK, N_EMBD, std=0.1)
                tensors[f"{blk}.ssm_conv1d.weight"] = matrix(n_conv, D_CONV)
                tensors[f"{blk}.ssm_conv1d.bias"] = small(n_conv)
                tensors[f"{blk}.ssm_dt.bias"] = small(DT_RANK)
                tensors[f"{blk}.ssm_a"] = -np.exp(matrix(DT_RANK, 1))
                tensors[f"{blk}.ssm_d"] = norm(DT_RANK, 1)
                tensors[f"{blk}.ssm_norm.weight"] = norm(N_GROUP, D_INNER // N_GROUP)
                tensors[f"{blk}.ssm_out.weight"] = matrix(N_EMBD, D_INNER, std=0.1)
            tensors[f"{blk}.ffn_norm.weight"] = norm()
            tensors[f"{blk}.ffn_gate.weight"] = matrix(N_FF, N_EMBD)
            tensors[f"{blk}.ffn_up.weight"] = matrix(N_FF, N_EMBD)
            tensors[f"{blk}.ffn_down.weight"] = matrix(N_EMBD, N_FF)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    add_fields(writer, tokenizer)
    tensors["output_norm.weight"] = norm()
    tensors["output.weight"] = matrix(n_vocab, N_EMBD, std=1.0)
    for name, values in tensors.items():
        writer.add_tensor(name, values)
    write_and_close(writer)
    return path


def _mamba_hparams(writer: gguf.GGUFWriter, *, n_groups: int | None) -> None:
    """The ssm.* keys of mamba (n_groups None) and mamba2 layers, and their norm's epsilon."""
    writer.add_ssm_conv_kernel(D_CONV)
    writer.add_ssm_inner_size(D_INNER)
    writer.add_ssm_state_size(D_STATE)
    writer.add_ssm_time_step_rank(DT_RANK)
    if n_groups is not None:
        writer.add_ssm_group_count(n_groups)
    writer.add_layer_norm_rms_eps(1e-5)
