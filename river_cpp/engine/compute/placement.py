"""Where a model's weights and KV cache live: the host, a GPU, or another machine (RPC).

River's placement is the paper's backbone offloading: every token uses the river, so
the KV cache and the river's layers (with its head) go to the device first, then the
backbone's layers from the first (which every token runs before it may exit) to the
last, then the backbone's head; what does not fit stays on the host. This module only
plans: the engine (river_cpp.engine._core) applies the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence

from river_cpp.engine import _core

HOST = "CPU"
# Left free on each device for compute buffers and the runtime's own allocations.
DEVICE_RESERVE_BYTES = 512 << 20
MIB = 1 << 20


@dataclass(frozen=True)
class Device:
    """An offloading device: a GPU, an accelerator, or an RPC server's device."""

    name: str
    description: str = ""
    type: str = "gpu"
    memory_free: int = 0
    memory_total: int = 0


@dataclass(frozen=True)
class Placement:
    """The device of each part of a model: layers of each weight set, heads, KV cache.

    Names are ggml's device names ("CUDA0", "Metal", "RPC0", ...); HOST ("CPU") keeps a
    part in the mapped file on the host. `bytes` is what the plan expects each device to
    hold (weights and cache; compute buffers come on top).
    """

    backbone_layers: tuple[str, ...]
    river_layers: tuple[str, ...] = ()
    backbone_head: str = HOST
    river_head: str = HOST
    kv_cache: str = HOST
    bytes: Mapping[str, int] = field(default_factory=dict)

    @property
    def devices(self) -> list[str]:
        """The devices this placement uses besides the host, in first-use order."""
        seen: list[str] = []
        for name in (self.kv_cache, *self.river_layers, self.river_head, *self.backbone_layers, self.backbone_head):
            if name != HOST and name not in seen:
                seen.append(name)
        return seen

    def engine_arguments(self) -> dict:
        """The keywords of _core.Engine.place."""
        return dict(
            backbone_layers=list(self.backbone_layers),
            river_layers=list(self.river_layers),
            backbone_head=self.backbone_head,
            river_head=self.river_head,
            kv_cache=self.kv_cache,
        )

    def describe(self) -> str:
        """Lines for `river-cpp generate -v`: where each part lives."""
        lines = [f"KV cache: {self.kv_cache}"]
        if self.river_layers:
            lines.append(f"river layers: {_ranges(self.river_layers)}; river head: {self.river_head}")
        lines.append(f"backbone layers: {_ranges(self.backbone_layers)}; backbone head: {self.backbone_head}")
        if self.bytes:
            lines.append(
                "planned bytes: " + ", ".join(f"{name} {size / MIB:.0f} MiB" for name, size in self.bytes.items())
            )
        return "\n".join(lines)


def _ranges(names: Sequence[str]) -> str:
    """'0-13 RPC0, 14-23 CPU' for a device name per layer."""
    parts, start = [], 0
    for i in range(1, len(names) + 1):
        if i == len(names) or names[i] != names[start]:
            span = str(start) if i - 1 == start else f"{start}-{i - 1}"
            parts.append(f"{span} {names[start]}")
            start = i
    return ", ".join(parts)


OWN_ATTENTION = "river-cpp's own"


def describe_attention(plan: Mapping[str, Sequence[str]]) -> str:
    """One line on which attention a model's layers run, from an attention plan
    (_core.Engine.attention_plan: per layer of each weight set, why ggml's attention
    takes it, "" where ours does): "river-cpp's own in every layer", or each weight
    set's layers by attention, with why ggml's."""
    sets = {name: plan.get(f"{name}_layers", ()) for name in ("backbone", "river")}
    reasons = {r for layers in sets.values() for r in layers}
    if len(reasons) == 1:
        (reason,) = reasons
        if not reason:
            return f"{OWN_ATTENTION} in every layer (batch-invariant: a prompt's rows are its steps' bits)"
        return f"ggml's in every layer ({reason})"
    parts = []
    for name, layers in sets.items():
        if layers:
            labels = [OWN_ATTENTION if not r else f"ggml's ({r})" for r in layers]
            parts.append(f"{name} layers {_ranges(labels)}")
    return "; ".join(parts)


def offload_devices(rpc_servers: Iterable[str] = ()) -> list[Device]:
    """The devices a model may offload to: this machine's GPUs and accelerators in
    ggml's order, then the devices of the given RPC servers (not those other models
    in this process added)."""
    return [
        Device(d["name"], d["description"], d["type"], d["memory_free"], d["memory_total"])
        for d in _core.devices(list(rpc_servers))
        if d["type"] != "cpu"
    ]


def plan_placement(
    sizes: Mapping[str, object],
    devices: Sequence[Device],
    n_gpu_layers: int = -1,
    main_gpu: int = 0,
    reserve: int = DEVICE_RESERVE_BYTES,
) -> Placement:
    """Place a model's parts on `devices` in River's order of use, within each device's
    free memory less `reserve`.

    sizes: the bytes of each part, as _core.Engine.placement_sizes() gives them.
    n_gpu_layers: backbone layers to offload (-1: all, and the backbone head; 0: nothing
        at all, not even the river). The cache, the river and its head go first
        whenever n_gpu_layers is not 0.
    main_gpu: the device to fill first; the others follow in order.
    """
    backbone = list(sizes["backbone_layers"])  # type: ignore[call-overload]
    river = list(sizes["river_layers"])  # type: ignore[call-overload]
    n_layer = len(backbone)
    if isinstance(n_gpu_layers, bool) or not isinstance(n_gpu_layers, int) or not -1 <= n_gpu_layers <= n_layer:
        raise ValueError(f"n_gpu_layers must be -1 (all), 0 (none) or up to n_layer = {n_layer}, got {n_gpu_layers!r}")
    placed = {
        "backbone_layers": [HOST] * n_layer,
        "river_layers": [HOST] * len(river),
        "backbone_head": HOST,
        "river_head": HOST,
        "kv_cache": HOST,
    }
    if n_gpu_layers == 0 or not devices:
        return _placement(placed, sizes)
    if isinstance(main_gpu, bool) or not isinstance(main_gpu, int) or not 0 <= main_gpu < len(devices):
        names = ", ".join(f"{i}: {d.name}" for i, d in enumerate(devices))
        raise ValueError(f"main_gpu must index one of the devices ({names}), got {main_gpu!r}")

    n_backbone = n_layer if n_gpu_layers == -1 else n_gpu_layers
    # (part, index within it, bytes) in the order they earn a place on the device
    wanted: list[tuple[str, Optional[int], int]] = [("kv_cache", None, int(sizes["kv_cache"]))]  # type: ignore[call-overload]
    wanted += [("river_layers", il, size) for il, size in enumerate(river)]
    if river:
        wanted.append(("river_head", None, int(sizes["river_head"])))  # type: ignore[call-overload]
    wanted += [("backbone_layers", il, backbone[il]) for il in range(n_backbone)]
    if n_backbone == n_layer:
        wanted.append(("backbone_head", None, int(sizes["backbone_head"])))  # type: ignore[call-overload]

    order = list(devices[main_gpu:]) + list(devices[:main_gpu])
    room = [max(0, d.memory_free - reserve) for d in order]
    current = 0
    for part, index, size in wanted:
        target = next((i for i in range(current, len(order)) if size <= room[i]), None)
        if target is None:
            continue  # stays on the host; a smaller later part may still fit
        current = target
        room[target] -= size
        if index is None:
            placed[part] = order[target].name
        else:
            placed[part][index] = order[target].name  # type: ignore[index]
    return _placement(placed, sizes)


def _placement(placed: dict, sizes: Mapping[str, object]) -> Placement:
    total: dict[str, int] = {}

    def add(name: str, size: int) -> None:
        total[name] = total.get(name, 0) + int(size)

    for part in ("backbone_layers", "river_layers"):
        for name, size in zip(placed[part], sizes[part]):  # type: ignore[call-overload]
            add(name, size)
    for part in ("backbone_head", "river_head", "kv_cache"):
        if part != "river_head" or placed["river_layers"]:
            add(placed[part], sizes[part])  # type: ignore[arg-type]
    return Placement(
        backbone_layers=tuple(placed["backbone_layers"]),
        river_layers=tuple(placed["river_layers"]),
        backbone_head=placed["backbone_head"],
        river_head=placed["river_head"],
        kv_cache=placed["kv_cache"],
        bytes=total,
    )
