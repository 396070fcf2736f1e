"""The multi-device engine, on this CPU machine: an RPC server on loopback is a device
with its own memory, as a GPU is, so placing layers there exercises the scheduler,
device copies of weights, a cache on a device and copies between devices. Every
placement must compute what the all-host engine computes.

Needs ggml's RPC backend (llama-cpp-python built with -DGGML_RPC=on, as
scripts/install_with_devices.sh does). Without it these tests skip and say so, unless
RIVER_REQUIRE_RPC is set (CI sets it), where they fail.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from hybrid import write_hybrid_gguf
from llama_run import llama_run
from routes import PAPER_RIVER

from river_cpp import RiverModel, _core
from river_cpp.placement import HOST
from river_cpp.policy import ExitPolicy

PROMPT = "The old lighthouse keeper climbed the stairs"

pytestmark = pytest.mark.usefixtures("river_cache")


def _require_rpc() -> None:
    if _core.has_rpc():
        return
    message = "this ggml has no RPC backend: install with scripts/install_with_devices.sh -e '.[test]'"
    if os.environ.get("RIVER_REQUIRE_RPC"):
        pytest.fail(message + " (RIVER_REQUIRE_RPC is set)")
    pytest.skip(message)


def _start_rpc_server() -> tuple[subprocess.Popen, str]:
    """`river-cpp rpc-server` on a free loopback port, once it answers."""
    _require_rpc()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-c", "from river_cpp.cli import main; main()", "rpc-server", "--port", str(port)]
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


def _greedy(model: RiverModel, ids: list[int], n: int) -> list[int]:
    return list(model.generate(ids, max_tokens=n, temperature=0.0).token_ids)


@pytest.mark.parametrize("n_gpu_layers", [-1, 2])
def test_rpc_placement_computes_what_the_host_computes(tiny_llama4, rpc_server, n_gpu_layers):
    with (
        RiverModel(tiny_llama4, river="q4_0", n_ctx=256) as host,
        RiverModel(tiny_llama4, river="q4_0", n_ctx=256, rpc_servers=[rpc_server], n_gpu_layers=n_gpu_layers) as remote,
    ):
        placement = remote.placement
        rpc = placement.kv_cache
        assert rpc.startswith("RPC") and placement.river_layers == (rpc,) * 4
        expected_backbone = (rpc,) * 4 if n_gpu_layers == -1 else (rpc, rpc, HOST, HOST)
        assert placement.backbone_layers == expected_backbone
        assert remote.engine.placement["backbone_layers"] == list(expected_backbone)
        assert host.placement.devices == []

        ids = host.tokenize(PROMPT)
        for route in ("backbone", "decode"):
            host.reset()
            remote.reset()
            np.testing.assert_allclose(
                remote.forward(ids, last_only=False, route=route),
                host.forward(ids, last_only=False, route=route),
                atol=1e-3,
            )
        host.reset()
        remote.reset()
        assert _greedy(remote, ids, 64) == _greedy(host, ids, 64)


def test_rpc_split_with_exits_and_speculation(demo_backbone, rpc_server, monkeypatch):
    monkeypatch.delenv("RIVER_CPP_CACHE_DIR")  # the demo river lives in the user cache
    options = dict(river="q8_0", n_ctx=512, n_threads=1, progress=False, policy=ExitPolicy.uniform(0.98))
    with (
        RiverModel(demo_backbone, **options) as host,
        RiverModel(demo_backbone, **options, rpc_servers=[rpc_server], n_gpu_layers=10) as remote,
    ):
        assert remote.placement.backbone_layers[9] != HOST and remote.placement.backbone_layers[10] == HOST
        ids = host.tokenize(PROMPT)
        ours, theirs = _greedy(remote, ids, 64), _greedy(host, ids, 64)
        assert ours == theirs
        host.reset()
        remote.reset()
        spec = dict(max_tokens=32, temperature=0.0, speculative=True)
        assert remote.generate(ids, **spec).token_ids == host.generate(ids, **spec).token_ids


@pytest.mark.parametrize("k", [1, 2])
def test_rpc_static_split_equals_llama_cpp_hybrid(tiny_llama4, rpc_server, k, tmp_path):
    with RiverModel(
        tiny_llama4, **PAPER_RIVER, policy=ExitPolicy.at_layer(k), n_ctx=128, rpc_servers=[rpc_server], n_gpu_layers=1
    ) as model:
        assert model.placement.backbone_layers[0] != HOST and model.placement.backbone_layers[1] == HOST
        ids = model.tokenize(PROMPT)
        ours = model.forward(ids)
        hybrid = write_hybrid_gguf(tiny_llama4, model.river_path, k, tmp_path / f"hybrid{k}.gguf")
        theirs = llama_run(hybrid, ids, 32)
        decode = theirs.decode_along(model, ours)
    assert np.abs(ours - theirs.logits).max() < 5e-2
    theirs.assert_decode_matches(decode, 1.0, min_decided=8)  # the tolerance of test_river's check


def test_rpc_placement_within_a_memory_budget(tiny_llama4, rpc_server, monkeypatch):
    """The plan is followed when a device's memory allows only part of the model."""
    import river_cpp.placement as placement_module

    with RiverModel(tiny_llama4, river="q4_0", n_ctx=128) as probe:
        sizes = probe.engine.placement_sizes()
    river_first = sizes["kv_cache"] + sum(sizes["river_layers"]) + sizes["river_head"]
    budget = river_first + sizes["backbone_layers"][0] + placement_module.DEVICE_RESERVE_BYTES
    real = placement_module.offload_devices

    def small_device(rpc_servers=()):
        return [placement_module.Device(d.name, d.description, d.type, budget, budget) for d in real(rpc_servers)]

    monkeypatch.setattr("river_cpp.model.offload_devices", small_device)
    with RiverModel(tiny_llama4, river="q4_0", n_ctx=128, rpc_servers=[rpc_server]) as model:
        rpc = model.placement.kv_cache
        assert rpc != HOST
        assert model.placement.backbone_layers == (rpc, HOST, HOST, HOST)
        planned = model.placement.bytes[rpc]
        assert planned == river_first + sizes["backbone_layers"][0]
        # norms a river layer shares with a backbone layer on the same device are one copy
        assert sizes["kv_cache"] + sum(sizes["river_layers"]) <= model.engine.placed_bytes()[rpc] <= planned


def test_rpc_server_refuses_a_public_address_without_allow_remote(capsys):
    from river_cpp.cli import main

    assert main(["rpc-server", "--host", "0.0.0.0", "--port", "50999"]) == 1
    assert "no authentication" in capsys.readouterr().err


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
restarted = subprocess.Popen(server_command)
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
