"""Placement arithmetic: River's order of use within each device's memory, and the
errors of impossible requests. Pure planning; tests/engine/test_devices.py runs the plans."""

from __future__ import annotations

import pytest

from river_cpp.engine.compute.placement import HOST, Device, Placement, plan_placement

MIB = 1 << 20
# a 4-layer model with a river: backbone layers of 10 MiB, river layers of 3 MiB
SIZES = {
    "backbone_layers": [10 * MIB] * 4,
    "river_layers": [3 * MIB] * 4,
    "backbone_head": 20 * MIB,
    "river_head": 5 * MIB,
    "kv_cache": 8 * MIB,
}
RIVER_FIRST = 8 + 4 * 3 + 5  # MiB: cache, river layers and river head


def gpu(name: str, free_mib: float) -> Device:
    return Device(name, memory_free=int(free_mib * MIB), memory_total=int(free_mib * MIB))


def test_without_devices_everything_stays_on_the_host():
    placement = plan_placement(SIZES, [], n_gpu_layers=-1, reserve=0)
    assert placement.devices == []
    assert set(placement.backbone_layers) == set(placement.river_layers) == {HOST}
    assert placement.bytes == {HOST: sum(SIZES["backbone_layers"]) + sum(SIZES["river_layers"]) + 33 * MIB}


def test_all_layers_fit():
    placement = plan_placement(SIZES, [gpu("GPU0", 1000)], n_gpu_layers=-1, reserve=0)
    assert placement.backbone_layers == ("GPU0",) * 4 and placement.river_layers == ("GPU0",) * 4
    assert (placement.kv_cache, placement.river_head, placement.backbone_head) == ("GPU0",) * 3
    assert placement.bytes == {"GPU0": (40 + 12 + 20 + 5 + 8) * MIB}


def test_the_river_and_cache_go_first_then_backbone_layers_from_the_first():
    # room for cache + river + head and two backbone layers, with 1 MiB to spare
    placement = plan_placement(SIZES, [gpu("GPU0", RIVER_FIRST + 21)], n_gpu_layers=-1, reserve=0)
    assert placement.kv_cache == placement.river_head == "GPU0"
    assert placement.river_layers == ("GPU0",) * 4
    assert placement.backbone_layers == ("GPU0", "GPU0", HOST, HOST)
    assert placement.backbone_head == HOST
    assert placement.bytes["GPU0"] == (RIVER_FIRST + 20) * MIB


def test_the_reserve_is_kept_free():
    placement = plan_placement(SIZES, [gpu("GPU0", RIVER_FIRST + 21)], n_gpu_layers=-1, reserve=15 * MIB)
    assert placement.backbone_layers == (HOST,) * 4
    assert placement.river_layers == ("GPU0",) * 4


def test_n_gpu_layers_counts_backbone_layers():
    placement = plan_placement(SIZES, [gpu("GPU0", 1000)], n_gpu_layers=3, reserve=0)
    assert placement.backbone_layers == ("GPU0",) * 3 + (HOST,)
    assert placement.backbone_head == HOST  # the head follows only when every layer is offloaded
    assert placement.river_layers == ("GPU0",) * 4
    assert plan_placement(SIZES, [gpu("GPU0", 1000)], n_gpu_layers=4, reserve=0).backbone_head == "GPU0"


def test_n_gpu_layers_zero_keeps_even_the_river_on_the_host():
    placement = plan_placement(SIZES, [gpu("GPU0", 1000)], n_gpu_layers=0, reserve=0)
    assert placement.devices == []


def test_a_cache_too_large_stays_on_the_host_while_the_river_moves():
    sizes = dict(SIZES, kv_cache=500 * MIB)
    placement = plan_placement(sizes, [gpu("GPU0", 100)], n_gpu_layers=-1, reserve=0)
    assert placement.kv_cache == HOST
    assert placement.river_layers == ("GPU0",) * 4


def test_main_gpu_is_filled_first_then_the_others():
    devices = [gpu("GPU0", 1000), gpu("GPU1", RIVER_FIRST + 10)]
    placement = plan_placement(SIZES, devices, n_gpu_layers=-1, main_gpu=1, reserve=0)
    assert placement.kv_cache == "GPU1" and placement.river_layers == ("GPU1",) * 4
    assert placement.backbone_layers == ("GPU1", "GPU0", "GPU0", "GPU0")
    assert placement.devices == ["GPU1", "GPU0"]


def test_without_a_river():
    sizes = dict(SIZES, river_layers=[], river_head=0)
    placement = plan_placement(sizes, [gpu("GPU0", 8 + 10)], n_gpu_layers=-1, reserve=0)
    assert placement.river_layers == ()
    assert placement.kv_cache == "GPU0" and placement.backbone_layers == ("GPU0", HOST, HOST, HOST)


@pytest.mark.parametrize("n_gpu_layers", [-2, 5, True, 1.5, "3"])
def test_n_gpu_layers_out_of_range(n_gpu_layers):
    with pytest.raises(ValueError, match="n_gpu_layers"):
        plan_placement(SIZES, [gpu("GPU0", 1000)], n_gpu_layers=n_gpu_layers)


@pytest.mark.parametrize("main_gpu", [-1, 2, None])
def test_main_gpu_out_of_range(main_gpu):
    with pytest.raises(ValueError, match="main_gpu must index one of the devices"):
        plan_placement(SIZES, [gpu("GPU0", 1000), gpu("GPU1", 1000)], main_gpu=main_gpu)


def test_describe_gives_layer_ranges():
    placement = Placement(
        backbone_layers=("RPC0", "RPC0", HOST, HOST), river_layers=("RPC0",) * 4, river_head="RPC0", kv_cache="RPC0"
    )
    text = placement.describe()
    assert "KV cache: RPC0" in text
    assert "river layers: 0-3 RPC0; river head: RPC0" in text
    assert "backbone layers: 0-1 RPC0, 2-3 CPU; backbone head: CPU" in text
