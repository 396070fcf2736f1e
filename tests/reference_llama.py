"""An independent numpy llama forward pass, one token at a time, with a per-token
route (which weight file computes each layer). Used to check what the engine writes
into the shared KV cache. Reads weights with gguf-py; shares no code with river_cpp.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np


def read_tensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a GGUF, dequantized to float32 in numpy order ([n_out, n_in])."""
    reader = gguf.GGUFReader(path)
    return {t.name: np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32) for t in reader.tensors}


def read_hparams(path: Path) -> dict[str, float]:
    reader = gguf.GGUFReader(path)

    def value(key: str) -> float:
        field = reader.get_field(key)
        return field.parts[field.data[0]][0].item()

    return {
        "n_head": int(value("llama.attention.head_count")),
        "n_head_kv": int(value("llama.attention.head_count_kv")),
        "eps": float(value("llama.attention.layer_norm_rms_epsilon")),
        "rope_base": float(value("llama.rope.freq_base")),
    }


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x) + eps) * weight


def rope(x: np.ndarray, pos: int, base: float) -> np.ndarray:
    """Rotate adjacent pairs (x[2i], x[2i+1]) of each head by pos * base^(-2i/d)."""
    d = x.shape[-1]
    theta = pos * base ** (-np.arange(0, d, 2) / d)
    cos, sin = np.cos(theta), np.sin(theta)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


class ReferenceLlama:
    """Backbone tensors plus river matrices; K/V history per layer."""

    def __init__(self, backbone: Path, river: Path) -> None:
        self.hp = read_hparams(backbone)
        self.backbone = read_tensors(backbone)
        self.river = {**self.backbone, **read_tensors(river)}  # river matrices over shared norms
        self.n_layer = sum(1 for name in self.backbone if name.endswith(".attn_norm.weight"))
        self.keys: list[list[np.ndarray]] = [[] for _ in range(self.n_layer)]
        self.values: list[list[np.ndarray]] = [[] for _ in range(self.n_layer)]
        self.states: list[np.ndarray] = []  # the last step's residual stream entering each layer, and after the last

    def step(self, token: int, exit_layer: int, *, tail_layers: int = 0) -> np.ndarray:
        """One token that runs `exit_layer` backbone layers, then the river (and the
        backbone again for the last `tail_layers` layers); returns logits."""
        hp = self.hp
        pos = len(self.keys[0])
        h = self.backbone["token_embd.weight"][token].astype(np.float64)
        self.states = []
        for il in range(self.n_layer):
            self.states.append(h)
            on_river = exit_layer <= il < self.n_layer - tail_layers
            w = self.river if on_river else self.backbone
            p = f"blk.{il}."
            x = rms_norm(h, w[p + "attn_norm.weight"], hp["eps"])
            q = (w[p + "attn_q.weight"] @ x).reshape(hp["n_head"], -1)
            k = (w[p + "attn_k.weight"] @ x).reshape(hp["n_head_kv"], -1)
            v = (w[p + "attn_v.weight"] @ x).reshape(hp["n_head_kv"], -1)
            q, k = rope(q, pos, hp["rope_base"]), rope(k, pos, hp["rope_base"])
            self.keys[il].append(k.reshape(-1))
            self.values[il].append(v.reshape(-1))
            h = h + w[p + "attn_output.weight"] @ self._attend(il, q)
            x = rms_norm(h, w[p + "ffn_norm.weight"], hp["eps"])
            gate, up = w[p + "ffn_gate.weight"] @ x, w[p + "ffn_up.weight"] @ x
            h = h + w[p + "ffn_down.weight"] @ (gate / (1 + np.exp(-gate)) * up)
        self.states.append(h)
        head = self.backbone.get("output.weight", self.backbone["token_embd.weight"])
        return head @ rms_norm(h, self.backbone["output_norm.weight"], self.hp["eps"])

    def _attend(self, il: int, q: np.ndarray) -> np.ndarray:
        n_head, head_dim = q.shape
        group = n_head // self.hp["n_head_kv"]
        keys = np.stack(self.keys[il]).reshape(len(self.keys[il]), -1, head_dim)  # [pos, kv_head, d]
        values = np.stack(self.values[il]).reshape(len(self.values[il]), -1, head_dim)
        out = np.empty_like(q)
        for h in range(n_head):
            scores = keys[:, h // group] @ q[h] / np.sqrt(head_dim)
            weights = np.exp(scores - scores.max())
            out[h] = (weights / weights.sum()) @ values[:, h // group]
        return out.reshape(-1)
