"""river_cpp.system_info() and `river-cpp info`: what they report agrees with the
installed packages and ggml, and the command runs with and without Vulkan devices."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

import river_cpp
from river_cpp._cpus import default_n_threads
from river_cpp.apps.cli import main
from river_cpp.apps.info import folder_bytes, format_system_info, system_info
from river_cpp.engine import _core
from river_cpp.engine.probes.extra_bufts import ENV

pytestmark = pytest.mark.usefixtures("river_cache")


def test_system_info_reports_this_installation(river_cache):
    river_cache.mkdir(parents=True, exist_ok=True)
    (river_cache / "some.bin").write_bytes(b"x" * 1000)
    info = system_info()
    assert info["river_cpp"] == river_cpp.__version__
    assert info["llama_cpp_python"] == importlib.metadata.version("llama-cpp-python")
    assert info["ggml"] == _core.ggml_version()
    assert "CPU" in info["backends"]
    assert info["devices"][-1]["type"] == "cpu"
    assert all(0 <= d["memory_free"] <= d["memory_total"] for d in info["devices"] if d["memory_total"])
    assert info["rpc"] == _core.has_rpc()
    assert info["own_attention"] == {"kernels_here": _core.own_attention_kernels()}
    assert info["cache"] == {"path": str(river_cache), "bytes": folder_bytes(river_cache)}
    assert info["cache"]["bytes"] >= 1000
    extra = info["extra_buffer_types"]
    assert extra["available"] == _core.cpu_extra_buffer_types()
    assert set(extra["allowed"]) <= set(extra["available"])
    if extra["mode"] == "auto":
        assert set(extra["verdicts"]) == set(extra["available"])
    json.dumps(info)  # plain data


def test_info_command_prints_every_part(capsys):
    info = system_info()
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert out == format_system_info(info) + "\n"
    for text in (
        info["river_cpp"],
        info["llama_cpp_python"],
        info["ggml"]["version"],
        info["cpu"]["model"],
        info["cache"]["path"],
        *info["backends"],
        *(d["name"] for d in info["devices"]),
        *info["extra_buffer_types"]["available"],
        *(v["reason"] for v in info["extra_buffer_types"]["verdicts"].values()),
        info["threads"]["reason"],
        info["threads"]["wait_policy"]["description"],
    ):
        assert text in out
    assert f"threads            {default_n_threads()} by default" in out
    assert "own attention      on the CPU over a host cache, by default (kernels here: baseline" in out
    assert ("RPC                built in" in out) == info["rpc"]


def test_info_json_is_system_info(capsys):
    assert main(["info", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["devices"] == json.loads(json.dumps(system_info()["devices"]))


def test_info_says_why_a_type_is_off(monkeypatch, capsys):
    monkeypatch.setenv(ENV, "none")
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert f"({ENV}=none)" in out
    for name in _core.cpu_extra_buffer_types():
        assert f"{name:<16} not used  not probed (none)" in out


def test_a_bad_override_is_a_clean_error(monkeypatch, capsys):
    monkeypatch.setenv(ENV, "fastest")
    assert main(["info"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("river-cpp: error:") and ENV in err


@pytest.mark.parametrize("visible", [None, "0"])
def test_info_runs_with_and_without_vulkan_devices(visible):
    """ggml skips Mesa's software Vulkan device unless GGML_VK_VISIBLE_DEVICES names it;
    `info` lists whatever devices there are either way (a fresh process: ggml reads the
    variable when it loads its backends)."""
    env = {k: v for k, v in os.environ.items() if k != "GGML_VK_VISIBLE_DEVICES"}
    if visible is not None:
        env["GGML_VK_VISIBLE_DEVICES"] = visible
    done = subprocess.run(
        [sys.executable, "-c", "from river_cpp.apps.cli import main; raise SystemExit(main(['info', '--json']))"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["devices"][-1]["type"] == "cpu"
    names = [d["name"] for d in info["devices"]]
    assert len(names) == len(set(names))


# ---------------------------------------------------------------- with a model llama.cpp runs


def test_info_on_a_recurrent_model_says_what_its_memory_allows(tmp_path, tokenizer_fields, capsys):
    from recurrent_archs import write_recurrent_gguf

    from river_cpp.engine.compute.llama_backbone import MEMORY_NOTES, RECURRENT

    path = write_recurrent_gguf(tmp_path / "tiny_mamba.gguf", "mamba", tokenizer_fields)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "backbone: llama.cpp" in out and f"memory: recurrent ({MEMORY_NOTES[RECURRENT]})" in out
    assert main(["info", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["backbone"]["memory"] == RECURRENT


def test_info_on_an_architecture_gguf_py_does_not_name(tmp_path, tokenizer_fields, capsys):
    from foreign_archs import UNLISTED, write_foreign_gguf

    path = write_foreign_gguf(tmp_path / "tiny_unlisted.gguf", UNLISTED, tokenizer_fields)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "backbone: llama.cpp" in out and f"not '{UNLISTED}'" in out and "memory: attention" in out


def test_info_on_an_unknown_architecture_is_one_error(tmp_path, tokenizer_fields, capsys):
    from foreign_archs import write_foreign_gguf

    path = write_foreign_gguf(tmp_path / "tiny_nonesuch.gguf", "nonesuch", tokenizer_fields)
    assert main(["info", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("river-cpp: error:") and err.count("\n") == 1
    assert "'nonesuch'" in err and ", ".join(_core.graph_architectures()) in err and "did not recognise" in err
