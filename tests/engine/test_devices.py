"""The multi-device engine on this CPU machine, with two kinds of second device:

- RPC: a `river-cpp rpc-server` on loopback, another CPU with its own memory, as a GPU
  has. Placing layers there exercises the scheduler, device copies of weights, a cache
  on a device and copies between devices; it computes with the CPU's kernels, so every
  placement computes what the all-host engine computes, to float rounding.
- Vulkan: Mesa's lavapipe (Vulkan0, "llvmpipe"), a conformant Vulkan driver that runs
  on the CPU, behind ggml's Vulkan backend: a GPU backend with its own kernels, buffer
  types and supports_op. Its kernels round differently from the CPU's, so its logits
  are held to measured tolerances (VULKAN_LOGIT_ATOL) and its greedy tokens may leave
  the host's only at a near-tie, which is reported (docs/devices.md).

Both need llama-cpp-python built with the backends (scripts/install_with_devices.sh;
RIVER_DEVICES=rpc builds RPC alone). Without one, its tests skip and say so, unless
RIVER_REQUIRE_RPC or RIVER_REQUIRE_VULKAN is set (CI sets them), where they fail.
The Vulkan device is visible to the tests only (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest
from hybrid import write_hybrid_gguf
from llama_run import llama_run
from routes import PAPER_RIVER

import river_cpp.engine.compute.graph_backbone
import river_cpp.engine.compute.placement
from river_cpp import RiverModel, Speculative
from river_cpp.engine import _core
from river_cpp.engine.compute.placement import HOST
from river_cpp.engine.compute.policy import ExitPolicy

PROMPT = "The old lighthouse keeper climbed the stairs"
# Tokens the demo model generates per run: lavapipe takes seconds per demo token.
N_DEMO_TOKENS = 12

# The largest |device - host| logit difference accepted, over every position and
# token, for the F16 files these tests run (see docs/devices.md for the measurements).
# RPC computes with the CPU's own kernels: float rounding of the split alone.
RPC_LOGIT_ATOL = 1e-3
# lavapipe: twice the largest max |Vulkan0 - CPU| measured over every logit of a
# 9-token prompt, on whole-model offload (docs/devices.md):
#   tiny_llama4 (F16, logits up to 39): 0.076; the demo backbone (F16, up to 27): 0.024.
# llama.cpp's own CPU-vs-Vulkan distance on the same files is the same to the bit
# (our Vulkan logits equal llama.cpp's there): ggml-vulkan's F16 matrix kernels
# round and accumulate differently from the CPU's, whoever builds the graph.
VULKAN_LOGIT_ATOL = 0.15
# The same for a quantized river (Q4_0 and Q8_0 both measured 1.5 on tiny_llama4's
# river route, logits up to 41): the CPU quantizes activations to Q8_0 for quantized
# matrices, while ggml-vulkan without integer dot products (lavapipe) multiplies F16
# activations with dequantized weights; the tiny model's large random weights amplify
# the difference layer by layer. test_static_split_equals_llama_cpp_hybrid holds the
# river on Vulkan0 to llama.cpp's on the same device within 5e-2.
VULKAN_RIVER_LOGIT_ATOL = 3.0

pytestmark = pytest.mark.usefixtures("river_cache")


def _require(available: bool, message: str, variable: str) -> None:
    if available:
        return
    if os.environ.get(variable):
        pytest.fail(f"{message} ({variable} is set)")
    pytest.skip(message)


def _require_rpc() -> None:
    _require(
        _core.has_rpc(),
        "this ggml has no RPC backend: install with scripts/install_with_devices.sh -e '.[test]'",
        "RIVER_REQUIRE_RPC",
    )


def _require_vulkan() -> None:
    names = [d["name"] for d in _core.devices()]
    _require(
        "Vulkan0" in names,
        "no Vulkan device: this ggml was built without Vulkan (RIVER_DEVICES=rpc) or finds no Vulkan driver "
        f"(lavapipe: Debian's mesa-vulkan-drivers); devices: {', '.join(names)}; "
        "install with scripts/install_with_devices.sh -e '.[test]'",
        "RIVER_REQUIRE_VULKAN",
    )


def _start_rpc_server() -> tuple[subprocess.Popen, str]:
    """`river-cpp rpc-server` on a free loopback port, once it answers."""
    _require_rpc()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-c", "from river_cpp.apps.cli import main; main()", "rpc-server", "--port", str(port)]
    server = subprocess.Popen([*command, "-t", "1"], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"127.0.0.1:{port}"
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"rpc-server did not start: {server.stderr.read()}")
            time.sleep(0.2)


@pytest.fixture(scope="session")
def rpc_server():
    """An RPC server for the whole session: a server this process used must stay
    there while the process lives (see test_a_server_that_goes_away for one that does not)."""
    server, endpoint = _start_rpc_server()
    yield endpoint
    server.kill()
    server.wait()


@dataclass(frozen=True)
class Offload:
    """A second device as the tests reach it."""

    kind: str  # "rpc" or "vulkan": which runner llama.cpp's reference uses
    options: dict = field(default_factory=dict)  # RiverModel keywords that make it available
    logit_atol: float = RPC_LOGIT_ATOL  # accepted |device - host| logit difference, F16
    river_atol: float = RPC_LOGIT_ATOL  # the same where a quantized river computes

    def owns(self, name: str) -> bool:
        """Whether the ggml device `name` is this device."""
        return name.startswith("RPC") if self.kind == "rpc" else name == "Vulkan0"


@pytest.fixture
def vulkan_device(monkeypatch) -> Offload:
    """lavapipe's Vulkan0, offered to the models of this test (conftest hides it elsewhere)."""
    _require_vulkan()
    compute = river_cpp.engine.compute
    monkeypatch.setattr(compute.graph_backbone, "offload_devices", compute.placement.offload_devices)
    return Offload("vulkan", logit_atol=VULKAN_LOGIT_ATOL, river_atol=VULKAN_RIVER_LOGIT_ATOL)


@pytest.fixture(params=[pytest.param("rpc", marks=pytest.mark.rpc), "vulkan"])
def device(request) -> Offload:
    """Each second device in turn: the RPC server's, then Vulkan0."""
    if request.param == "rpc":
        return Offload("rpc", {"rpc_servers": [request.getfixturevalue("rpc_server")]})
    return request.getfixturevalue("vulkan_device")


def _greedy(model: RiverModel, ids: list[int], n: int, **options) -> list[int]:
    model.reset()
    return list(model.generate(ids, max_tokens=n, temperature=0.0, **options).token_ids)


def assert_same_tokens(host: RiverModel, ids: list[int], expected: list[int], got: list[int], atol: float) -> None:
    """got == expected (the host's greedy tokens), except from a position where the
    host's top two logits lie within `atol` (the device's logit tolerance): such a
    near-tie may go either way on a device that rounds differently, and is reported.
    The host's logits there are replayed as generation computes them: the prompt,
    then one decode step per token."""
    if got == expected:
        return
    i = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b), min(len(expected), len(got)))
    assert i < min(len(expected), len(got)), f"lengths differ: {len(expected)} vs {len(got)}"
    host.reset()
    logits = host.forward(ids, last_only=True)[0]
    for token in expected[:i]:
        logits = host.forward([token], last_only=True)[0]
    gap = float(logits[expected[i]] - logits[got[i]])
    assert gap < atol, f"token {i} differs ({expected[i]} vs {got[i]}) with a host logit gap of {gap:.3g}"
    warnings.warn(f"the device's greedy tokens leave the host's at token {i}, a near-tie (gap {gap:.2e})", stacklevel=2)


@pytest.mark.parametrize("n_gpu_layers", [-1, 2])
@pytest.mark.slow
def test_placement_computes_what_the_host_computes(tiny_llama4, device, n_gpu_layers):
    """Whole-model offload and a split, on F16: the backbone and the river routes. The
    cache goes to the device first, so every layer keeps ggml's attention there."""
    with (
        # the host computes the attention the device does: ggml's (ours would move the last bits)
        RiverModel(tiny_llama4, river="q4_0", n_ctx=256, n_gpu_layers=0, own_attention=False) as host,
        RiverModel(tiny_llama4, river="q4_0", n_ctx=256, n_gpu_layers=n_gpu_layers, **device.options) as remote,
    ):
        placement = remote.placement
        name = placement.kv_cache
        assert device.owns(name) and placement.river_layers == (name,) * 4 and placement.river_head == name
        expected_backbone = (name,) * 4 if n_gpu_layers == -1 else (name, name, HOST, HOST)
        assert placement.backbone_layers == expected_backbone
        assert placement.backbone_head == (name if n_gpu_layers == -1 else HOST)
        assert remote.engine.placement["backbone_layers"] == list(expected_backbone)
        assert host.placement.devices == []
        assert remote.attention == f"ggml's in every layer (the KV cache is on {name})"

        ids = host.tokenize(PROMPT)
        for route, atol in (("backbone", device.logit_atol), ("decode", device.river_atol)):
            host.reset()
            remote.reset()
            np.testing.assert_allclose(
                remote.forward(ids, last_only=False, route=route),
                host.forward(ids, last_only=False, route=route),
                atol=atol,
                rtol=0,
            )
        assert remote.engine.fallback_ops == {}
        assert_same_tokens(host, ids, _greedy(host, ids, 32), _greedy(remote, ids, 32), device.river_atol)


@pytest.mark.real_model
@pytest.mark.slow
def test_split_with_exits_and_speculation(demo_backbone, device, monkeypatch):
    """The river and its head on the device, backbone layers from 10 on the host; tau
    exits at mixed per-token depths, and lossless River's greedy identity."""
    monkeypatch.delenv("RIVER_CPP_CACHE_DIR")  # the demo river lives in the user cache
    options = dict(river="q8_0", n_ctx=512, n_threads=1, progress=False, policy=ExitPolicy.uniform(0.98))
    with (
        RiverModel(demo_backbone, **options, n_gpu_layers=0) as host,
        RiverModel(demo_backbone, **options, n_gpu_layers=10, **device.options) as remote,
    ):
        placement = remote.placement
        name = placement.kv_cache
        assert device.owns(name) and set(placement.river_layers) == {name} and placement.river_head == name
        assert placement.backbone_layers[9] == name and set(placement.backbone_layers[10:]) == {HOST}
        assert placement.backbone_head == HOST
        ids = host.tokenize(PROMPT)
        theirs = host.generate(ids, max_tokens=N_DEMO_TOKENS, temperature=0.0)
        remote.reset()
        ours = remote.generate(ids, max_tokens=N_DEMO_TOKENS, temperature=0.0)
        assert len(set(theirs.exit_layers)) > 1, "the policy must exit at mixed depths to test them"
        assert_same_tokens(host, ids, list(theirs.token_ids), list(ours.token_ids), device.river_atol)
        if ours.token_ids == theirs.token_ids:
            assert ours.exit_layers == theirs.exit_layers

        # lossless River on the device: its tokens are the device's own backbone's
        expected = _greedy(remote, ids, N_DEMO_TOKENS, policy=ExitPolicy.never())
        remote.reset()
        spec = Speculative(max_draft=4, adaptive=False)
        spec = remote.generate(ids, max_tokens=N_DEMO_TOKENS, temperature=0.0, speculative=spec)
        assert spec.speculative.drafted > 0
        assert_same_tokens(remote, ids, expected, list(spec.token_ids), device.logit_atol)
        assert remote.engine.fallback_ops == {}


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.slow
def test_static_split_equals_llama_cpp_hybrid(tiny_llama4, device, k, tmp_path):
    """Every token exits at k, with layer 0 on the device: what llama.cpp computes for
    the hybrid file (backbone below k, river from k), run on the same device (the CPU
    for RPC, whose server computes with the CPU's kernels)."""
    with RiverModel(
        tiny_llama4, **PAPER_RIVER, policy=ExitPolicy.at_layer(k), n_ctx=128, n_gpu_layers=1, **device.options
    ) as model:
        assert device.owns(model.placement.backbone_layers[0]) and model.placement.backbone_layers[1] == HOST
        ids = model.tokenize(PROMPT)
        ours = model.forward(ids)
        hybrid = write_hybrid_gguf(tiny_llama4, model.river_path, k, tmp_path / f"hybrid{k}.gguf")
        theirs = llama_run(hybrid, ids, 32, device="Vulkan0" if device.kind == "vulkan" else "CPU")
        decode = theirs.decode_along(model, ours)
    assert np.abs(ours - theirs.logits).max() < 5e-2
    theirs.assert_decode_matches(decode, 1.0, min_decided=8)  # the tolerance of test_river's check


def test_vulkan_distance_to_the_host_is_llama_cpps(tiny_llama4, vulkan_device):
    """Our Vulkan0 logits lie as near the CPU's as llama.cpp's Vulkan0 logits lie near
    its CPU's (within 2x), and as near llama.cpp's on the same device, for one file."""
    with (
        RiverModel(tiny_llama4, river=None, n_ctx=128, n_gpu_layers=0) as host,
        RiverModel(tiny_llama4, river=None, n_ctx=128) as remote,
    ):
        assert remote.placement.backbone_layers == ("Vulkan0",) * 4
        ids = host.tokenize(PROMPT)
        ours_cpu, ours_vulkan = host.forward(ids), remote.forward(ids)
    theirs_cpu, theirs_vulkan = llama_run(tiny_llama4, ids, 1).logits, llama_run(tiny_llama4, ids, 1, "Vulkan0").logits
    theirs = np.abs(theirs_vulkan - theirs_cpu).max()
    assert 0 < theirs < VULKAN_LOGIT_ATOL  # Vulkan0 really computed, with its own kernels
    assert np.abs(ours_vulkan - ours_cpu).max() <= 2 * theirs
    assert np.abs(ours_vulkan - theirs_vulkan).max() <= 2 * theirs


def test_prompt_cache_on_the_device(tiny_llama4, device):
    """A follow-up reuses the cached prefix held on the device and continues as a cold run."""
    with RiverModel(tiny_llama4, river=None, n_ctx=256, **device.options) as model:
        assert device.owns(model.placement.kv_cache)
        first = model.generate(PROMPT, max_tokens=6, temperature=0.0)
        follow_up = first.prompt_token_ids + first.token_ids + model.tokenize(" and more", add_bos=False)
        reused = model.cached_prefix(follow_up)
        assert reused == len(first.prompt_token_ids) + len(first.token_ids) - 1
        warm = model.generate(follow_up, max_tokens=8, temperature=0.0)
        model.reset()
        cold = model.generate(follow_up, max_tokens=8, temperature=0.0)
        assert warm.token_ids == cold.token_ids


def test_graph_reuse_past_256_positions_on_the_device(tiny_llama4, device):
    """Kept graphs equal fresh ones to the bit as the padded n_kv grows past 256 (a new
    shape), with the cache, the river and the backbone's first layers on the device
    and tau exits switching between segments (as tests/engine/test_engine.py on the host)."""
    options = dict(river="q4_0", n_ctx=384, n_threads=1, n_gpu_layers=2, policy=ExitPolicy.uniform(0.9, min_layer=1))
    with (
        RiverModel(tiny_llama4, **options, **device.options) as reused,
        RiverModel(tiny_llama4, **options, **device.options, reuse_graphs=False) as fresh,
    ):
        assert device.owns(reused.placement.kv_cache) and reused.placement.backbone_layers[2] == HOST
        ids = [int(i) for i in np.random.default_rng(0).integers(0, reused.n_vocab, 262)]
        np.testing.assert_array_equal(reused.forward(ids[:252]), fresh.forward(ids[:252]))
        depths = set()
        for i in range(252, 262):
            np.testing.assert_array_equal(reused.forward(ids[i : i + 1]), fresh.forward(ids[i : i + 1]))
            assert list(reused.last_exit_layers) == list(fresh.last_exit_layers)
            depths.update(reused.last_exit_layers)
        assert reused.n_past > 256 and len(depths) > 1
        assert fresh.engine.graph_stats["reuses"] == 0 and reused.engine.graph_stats["reuses"] > 5


@pytest.mark.rpc
def test_placement_within_a_memory_budget(tiny_llama4, rpc_server, monkeypatch):
    """The plan is followed when a device's memory allows only part of the model."""
    import river_cpp.engine.compute.placement as placement_module

    with RiverModel(tiny_llama4, river="q4_0", n_ctx=128) as probe:
        sizes = probe.engine.placement_sizes()
    river_first = sizes["kv_cache"] + sum(sizes["river_layers"]) + sizes["river_head"]
    budget = river_first + sizes["backbone_layers"][0] + placement_module.DEVICE_RESERVE_BYTES
    real = river_cpp.engine.compute.graph_backbone.offload_devices  # without the Vulkan device (tests/conftest.py)

    def small_device(rpc_servers=()):
        return [placement_module.Device(d.name, d.description, d.type, budget, budget) for d in real(rpc_servers)]

    monkeypatch.setattr("river_cpp.engine.compute.graph_backbone.offload_devices", small_device)
    with RiverModel(tiny_llama4, river="q4_0", n_ctx=128, rpc_servers=[rpc_server]) as model:
        rpc = model.placement.kv_cache
        assert rpc != HOST
        assert model.placement.backbone_layers == (rpc, HOST, HOST, HOST)
        planned = model.placement.bytes[rpc]
        assert planned == river_first + sizes["backbone_layers"][0]
        # norms a river layer shares with a backbone layer on the same device are one copy
        assert sizes["kv_cache"] + sum(sizes["river_layers"]) <= model.engine.placed_bytes()[rpc] <= planned


@pytest.mark.rpc
def test_rpc_server_refuses_a_public_address_without_allow_remote(capsys):
    from river_cpp.apps.cli import main

    assert main(["rpc-server", "--host", "0.0.0.0", "--port", "50999"]) == 1
    assert "no authentication" in capsys.readouterr().err


@pytest.mark.rpc
def test_unreachable_rpc_server_and_bad_n_gpu_layers(tiny_llama4):
    _require_rpc()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(ConnectionError, match="cannot reach the RPC server"):
            RiverModel(tiny_llama4, river=None, n_ctx=64, rpc_servers=[endpoint])
    with pytest.raises(ValueError, match="n_gpu_layers"):
        RiverModel(tiny_llama4, river=None, n_ctx=64, n_gpu_layers=5)


# Run in a child process, as a failure aborts or hangs the process. Loads three models
# on the server, kills it, then: closes one without a forward, drops one unclosed,
# forwards the third (twice), closes it, tries the server's endpoint again with a new
# server there, and generates on the CPU. Prints what it saw as JSON.
DEAD_SERVER_CHILD = """
import gc, json, os, signal, socket, subprocess, sys, time
from river_cpp import RiverModel

model_path, prompt, endpoint, server_pid, server_command = *sys.argv[1:4], int(sys.argv[4]), sys.argv[5:]
host, port = endpoint.rsplit(":", 1)
options = dict(river="q4_0", n_ctx=128, n_threads=1, progress=False)
report = {}


def wait_until_port(answers):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            if answers:
                return
        except OSError:
            if not answers:
                return
        time.sleep(0.05)
    sys.exit("the server's port did not " + ("answer" if answers else "close"))


def attempt(call):
    try:
        call()
    except Exception as e:
        return [type(e).__name__, str(e)]
    return None


def timed(call):
    start = time.monotonic()
    call()
    return time.monotonic() - start


a, b, c = (RiverModel(model_path, **options, rpc_servers=[endpoint]) for _ in range(3))
report["placements"] = [m.placement.kv_cache for m in (a, b, c)]
ids = a.tokenize(prompt)
a.forward(ids)
os.kill(server_pid, signal.SIGKILL)
wait_until_port(answers=False)  # the server's sockets are closed
report["close_unused"] = timed(b.close)
del c
gc.collect()
report["forward"] = attempt(lambda: a.forward(ids[:1]))
report["forward_again"] = attempt(lambda: a.forward(ids[:1]))
report["close"] = timed(a.close)
# Its output must not share this process's stdout, which carries only the report: on
# one host the server's "Accepted client connection" landed on the report's line.
restarted = subprocess.Popen(server_command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    wait_until_port(answers=True)
    report["reconnect"] = attempt(lambda: RiverModel(model_path, **options, rpc_servers=[endpoint]))
finally:
    restarted.kill()
    restarted.wait()
with RiverModel(model_path, **options) as cpu:
    report["cpu_tokens"] = list(cpu.generate(ids, max_tokens=16, temperature=0.0).token_ids)
print(json.dumps(report))
"""


@pytest.mark.rpc
def test_a_server_that_goes_away(tiny_llama4):
    """A forward on a model whose server went away raises RiverError naming the
    server, closing returns at once, and the process goes on: the server's endpoint
    is refused (ggml keeps its dead connection) and a CPU model loads and generates."""
    server, endpoint = _start_rpc_server()
    arguments = [str(tiny_llama4), PROMPT, endpoint, str(server.pid), *server.args]
    try:
        child = subprocess.run(
            [sys.executable, "-c", DEAD_SERVER_CHILD, *arguments], capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the child process hung: {e.stderr[-3000:] if e.stderr else ''}")
    finally:
        server.kill()
        server.wait()
    assert child.returncode == 0, f"the child process died ({child.returncode}): {child.stderr[-3000:]}"
    report = json.loads(child.stdout.strip().splitlines()[-1])
    assert all(device.startswith("RPC") for device in report["placements"])
    for forward in ("forward", "forward_again"):
        kind, message = report[forward]
        assert kind == "RiverError" and f"RPC server at {endpoint} went away" in message
    assert report["close_unused"] < 5 and report["close"] < 5
    kind, message = report["reconnect"]
    assert kind == "ConnectionError" and f"{endpoint} went away earlier in this process" in message
    with RiverModel(tiny_llama4, river="q4_0", n_ctx=128, n_threads=1, progress=False) as cpu:
        ids = cpu.tokenize(PROMPT)
        assert report["cpu_tokens"] == list(cpu.generate(ids, max_tokens=16, temperature=0.0).token_ids)
