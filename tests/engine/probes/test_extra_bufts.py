"""The probe of the CPU's extra buffer types: its verdicts on injected children (a crash,
a hang, a wrong or a right product), the mode override, the cache and its key, and
that the engine and llama.cpp peers follow the decision."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from river_cpp import RiverError, RiverModel
from river_cpp.apps.cli import main
from river_cpp.engine import _core
from river_cpp.engine.probes import extra_bufts as eb
from river_cpp.measure.llama_peer import LlamaCppPeer

AVAILABLE = _core.cpu_extra_buffer_types()
needs_repack = pytest.mark.skipif(
    eb.REPACK not in AVAILABLE, reason=f"this ggml's CPU backend has no {eb.REPACK} buffer type"
)


def child(code: str):
    """A probe child command that runs `code` in a fresh interpreter, whatever the type."""
    return lambda name: [sys.executable, "-c", code]


def report(plain: list, extra: list, type_name: str = "q4_0") -> str:
    """A child that prints a probe report with these two products."""
    products = [{"type": type_name, "plain": plain, "extra": extra}]
    return f"print({json.dumps(json.dumps({'products': products}))})"


@pytest.fixture
def fresh_memory(monkeypatch):
    """No verdicts remembered from earlier tests in this process."""
    monkeypatch.setattr(eb, "_verdicts_in_process", {})


# ---------------------------------------------------------------- the verdicts


def test_a_crashing_child_marks_the_type_unusable():
    code = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    verdict = eb.probe(["AMX"], command=child(code))["AMX"]
    assert not verdict.usable and verdict.reason == "crashed (SIGSEGV)"


def test_an_aborting_child_marks_the_type_unusable():
    verdict = eb.probe(["AMX"], command=child("import os; os.abort()"))["AMX"]
    assert not verdict.usable and verdict.reason == "crashed (SIGABRT)"


def test_a_hanging_child_times_out():
    verdict = eb.probe(["AMX"], command=child("import time; time.sleep(60)"), timeout_s=1)["AMX"]
    assert not verdict.usable and verdict.reason == "timed out after 1 s"


def test_a_wrong_product_marks_the_type_unusable():
    code = report(plain=[[1.0, 2.0], [3.0, 4.0]], extra=[[1.0, 2.0], [3.0, -4.0]])
    verdict = eb.probe(["AMX"], command=child(code))["AMX"]
    assert not verdict.usable and verdict.reason.startswith("wrong result for q4_0")


def test_a_non_finite_product_is_wrong():
    verdict = eb.judge(0, json.dumps({"products": [{"type": "q8_0", "plain": [1.0], "extra": [float("nan")]}]}), "")
    assert not verdict.usable and "q8_0" in verdict.reason


def test_a_product_within_rounding_passes():
    plain = np.linspace(-3, 3, 64).reshape(4, 16)
    extra = plain * (1 + 1e-6)
    verdicts = eb.probe(["CPU_REPACK"], command=child(report(plain.tolist(), extra.tolist())))
    assert verdicts["CPU_REPACK"] == eb.Verdict(True, "ok: q4_0")


def test_log_lines_before_the_report_are_ignored():
    code = "print('ggml: some log line'); " + report([[1.0]], [[1.0]])
    assert eb.probe(["X"], command=child(code))["X"].usable


def test_a_failing_child_says_why():
    code = "import sys; sys.exit('RiverError: no CPU extra buffer type')"
    verdict = eb.probe(["X"], command=child(code))["X"]
    assert not verdict.usable and verdict.reason == "failed: RiverError: no CPU extra buffer type"


@pytest.mark.parametrize("stdout", ["", "not json", '{"products": [{"type": "q4_0"}]}', '{"products": []}'])
def test_an_unreadable_or_empty_report_is_unusable(stdout):
    assert not eb.judge(0, stdout, "").usable


def test_each_type_gets_its_own_child():
    def command(name):
        return [sys.executable, "-c", report([[1.0]], [[1.0]]) if name == "GOOD" else "import os; os.abort()"]

    verdicts = eb.probe(["BAD", "GOOD"], command=command)
    assert not verdicts["BAD"].usable and verdicts["GOOD"].usable


# ---------------------------------------------------------------- the real child


@needs_repack
def test_repack_passes_the_real_probe():
    """The real child (python -m river_cpp.engine.probes.extra_bufts) multiplies through CPU_REPACK
    and the parent accepts its report: the path every host without AMX takes."""
    verdict = eb.probe([eb.REPACK])[eb.REPACK]
    assert verdict.usable, verdict.reason
    assert "q4_0" in verdict.reason


def test_children_never_import_from_their_working_folder(tmp_path):
    """A child command (river_cpp._child, the probe's) puts neither its working folder
    nor "" on its import path, and the folder this process's river_cpp came from first:
    a `python -m` or `-c` child would put the working folder first, and import a
    river_cpp/ source tree there."""
    import river_cpp
    from river_cpp._child import python_command

    assert eb._child_command("X")[:3] == python_command("")[:3]
    (tmp_path / "river_cpp").mkdir()
    (tmp_path / "river_cpp" / "__init__.py").write_text("raise ImportError('the working folder was imported')")
    code = "import json, sys, river_cpp; print(json.dumps([sys.path, river_cpp.__file__]))"
    done = subprocess.run(python_command(code), cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    path, imported = json.loads(done.stdout)
    assert str(tmp_path) not in path and "" not in path
    assert path[0] == str(Path(river_cpp.__file__).resolve().parent.parent)
    assert Path(imported).resolve() == Path(river_cpp.__file__).resolve()


@needs_repack
def test_the_probe_imports_this_package_not_the_working_folders(tmp_path, monkeypatch, river_cache, fresh_memory):
    """Run from a folder holding a river_cpp/ source tree without its built _core (a
    checkout next to a non-editable install), the probe's children import the package
    this process runs, not that tree: CPU_REPACK is still reported used. (In an
    editable install the import hook finds the checkout whatever the working folder:
    there test_children_never_import_from_their_working_folder is the telling one.)"""
    import river_cpp
    from river_cpp.apps.info import system_info

    sources = Path(river_cpp.__file__).parent
    shutil.copytree(sources, tmp_path / "river_cpp", ignore=shutil.ignore_patterns("_core*", "__pycache__"))
    assert not list((tmp_path / "river_cpp").rglob("_core*.so"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(eb.ENV, "auto")
    buffer_types = system_info(reprobe=True)["extra_buffer_types"]
    assert eb.REPACK in buffer_types["allowed"], buffer_types["verdicts"]
    assert buffer_types["verdicts"][eb.REPACK]["usable"]


@needs_repack
def test_probe_matmul_computes_the_product():
    """Both products are inputs @ weights.T (up to the weights' and the activations'
    rounding); None for types the buffer type does not take."""
    rng = np.random.default_rng(1)
    weights = rng.standard_normal((64, 512), dtype=np.float32)
    inputs = rng.standard_normal((3, 512), dtype=np.float32)
    products = [_core.probe_matmul(eb.REPACK, t, weights, inputs) for t in eb.PROBE_TYPES]
    assert any(p is not None for p in products)
    for plain, extra in (p for p in products if p is not None):
        assert plain.shape == extra.shape == (3, 64)
        assert eb.relative_error(inputs @ weights.T, plain) < 0.1
        assert eb.relative_error(plain, extra) < eb.TOLERANCE


@pytest.mark.parametrize(
    "args",
    [
        ("NO_SUCH_TYPE", "q4_0", np.zeros((64, 512)), np.zeros((1, 512))),
        (AVAILABLE[0] if AVAILABLE else "CPU_REPACK", "q4_0", np.zeros((64, 500)), np.zeros((1, 500))),
        (AVAILABLE[0] if AVAILABLE else "CPU_REPACK", "q4_0", np.zeros((64, 512)), np.zeros((1, 256))),
    ],
)
def test_probe_matmul_rejects_bad_arguments(args):
    with pytest.raises(RiverError):
        _core.probe_matmul(*args)


# ---------------------------------------------------------------- the override


@pytest.mark.parametrize("value, mode", [(None, "auto"), ("", "auto"), ("none", "none"), (" Repack ", "repack")])
def test_mode_from_the_environment(monkeypatch, value, mode):
    if value is None:
        monkeypatch.delenv(eb.ENV, raising=False)
    else:
        monkeypatch.setenv(eb.ENV, value)
    assert eb.mode_from_env() == mode


def test_an_unknown_mode_is_refused(monkeypatch):
    monkeypatch.setenv(eb.ENV, "amx")
    with pytest.raises(ValueError, match=eb.ENV):
        eb.mode_from_env()
    with pytest.raises(ValueError, match="mode"):
        eb.extra_bufts("sometimes")


@pytest.fixture
def two_types(monkeypatch, fresh_memory):
    """A CPU backend offering AMX and CPU_REPACK, of which the probe finds AMX crashing
    (no child runs: the verdicts are injected)."""
    monkeypatch.setattr(_core, "cpu_extra_buffer_types", lambda: ["AMX", eb.REPACK])
    verdicts = {"AMX": eb.Verdict(False, "crashed (SIGSEGV)"), eb.REPACK: eb.Verdict(True, "ok: q4_0")}
    monkeypatch.setattr(eb, "cached_probe", lambda names, key, **_: {n: verdicts[n] for n in names})


@pytest.mark.parametrize(
    "mode, allowed", [("auto", (eb.REPACK,)), ("none", ()), ("repack", (eb.REPACK,)), ("all", ("AMX", eb.REPACK))]
)
def test_each_mode_allows(two_types, monkeypatch, mode, allowed):
    monkeypatch.setenv(eb.ENV, mode)
    decision = eb.extra_bufts()
    assert decision.allowed == allowed
    note = decision.llama_cpp_note()
    if mode == "all":
        assert note is None
    else:
        assert "AMX" in note
        assert ("crashed (SIGSEGV)" in note) == (mode == "auto")


# ---------------------------------------------------------------- the cache


def test_cache_key_names_cpu_kernel_and_ggml():
    key = eb.cache_key()
    assert key["kernel"] == platform.release()
    assert key["cpu"] == eb.cpu_model() and key["cpu"]
    assert _core.ggml_version()["version"] in key["ggml"]
    assert set(key) == {"cpu", "kernel", "ggml", "llama_cpp_python"}


@pytest.mark.parametrize("field", ["cpu", "kernel", "ggml", "llama_cpp_python"])
def test_each_key_field_has_its_own_cache_file(river_cache, field):
    key = eb.cache_key()
    assert eb.cache_path({**key, field: key[field] + "x"}) != eb.cache_path(key)
    assert eb.cache_path(key).parent == river_cache / "extra_bufts"


def test_verdicts_are_probed_once_per_key(river_cache, fresh_memory, tmp_path):
    """The first call probes and writes the cache file; later ones (in this process or,
    from the file, in another) run no child; a changed key probes again."""
    runs = tmp_path / "runs"
    code = f"open({str(runs)!r}, 'a').write('x'); " + report([[1.0]], [[1.0]])
    key = {"cpu": "test CPU", "kernel": "1.0", "ggml": "0", "llama_cpp_python": "0"}
    first = eb.cached_probe(["X"], key, command=child(code))
    assert runs.read_text() == "x"
    assert eb.cached_probe(["X"], key, command=child(code)) == first
    eb._verdicts_in_process.clear()  # as another process would start
    assert eb.cached_probe(["X"], key, command=child(code)) == first
    assert runs.read_text() == "x"
    assert json.loads(eb.cache_path(key).read_text())["key"] == key
    eb.cached_probe(["X"], {**key, "kernel": "2.0"}, command=child(code))
    assert runs.read_text() == "xx"
    eb.cached_probe(["X"], key, command=child(code), reprobe=True)
    assert runs.read_text() == "xxx"


def test_timeouts_and_failures_are_not_cached(river_cache, fresh_memory):
    """A busy machine or a child that could not start says nothing about the type: the
    next process probes again; a crash is a finding and is kept."""
    key = {"cpu": "test CPU", "kernel": "1.0", "ggml": "0", "llama_cpp_python": "0"}
    commands = {
        "SLOW": "import time; time.sleep(60)",
        "BROKEN": "raise SystemExit(3)",
        "CRASH": "import os; os.abort()",
    }
    verdicts = eb.cached_probe(
        list(commands), key, command=lambda name: [sys.executable, "-c", commands[name]], timeout_s=1
    )
    assert not any(v.usable for v in verdicts.values())
    assert eb.read_verdicts(eb.cache_path(key)) == {"CRASH": verdicts["CRASH"]}


def test_an_unreadable_cache_file_is_probed_again(river_cache, fresh_memory):
    key = {"cpu": "test CPU", "kernel": "1.0", "ggml": "0", "llama_cpp_python": "0"}
    eb.cache_path(key).parent.mkdir(parents=True)
    eb.cache_path(key).write_text("{truncated")
    verdicts = eb.cached_probe(["X"], key, command=child("import os; os.abort()"))
    assert verdicts["X"].reason == "crashed (SIGABRT)"
    assert eb.read_verdicts(eb.cache_path(key)) == verdicts


# ---------------------------------------------------------------- who follows it


@pytest.mark.usefixtures("river_cache")
@needs_repack
@pytest.mark.parametrize("mode", ["none", "repack", "all"])
def test_the_engine_repacks_only_into_allowed_types(tiny_llama, monkeypatch, mode):
    monkeypatch.setenv(eb.ENV, mode)
    monkeypatch.setenv("RIVER_CPP_OWN_PRODUCTS", "none")  # else ours take the Q4_0 river, not CPU_REPACK
    with RiverModel(tiny_llama, river="q4_0", n_ctx=64, progress=False) as model:
        used = model.engine.repacked_by_buffer_type
        assert set(used) <= set(model.extra_bufts.allowed)
        assert (model.engine.repacked_tensors > 0) == (mode != "none")
        assert sum(used.values()) == model.engine.repacked_tensors
        model.generate("Hello", max_tokens=2)
        described = model.describe_buffer_types()
    if mode == "none":
        assert f"{eb.REPACK:<12} not used: {eb.REPACK} is off ({eb.ENV}=none)" in described
    # Each type that took matrices is listed with their count. Under "all" that may be
    # AMX rather than CPU_REPACK: where the host lists it, ggml prefers it.
    for name, count in used.items():
        assert f"{name:<12} {count} matrices" in described


@pytest.mark.usefixtures("river_cache")
def test_generate_verbose_prints_the_buffer_types(tiny_llama, capsys):
    assert main(["generate", "Hi", "--model", str(tiny_llama), "-n", "1", "--river", "q4_0", "-v"]) == 0
    err = capsys.readouterr().err
    assert f"host buffer types ({eb.ENV}=" in err
    for name in AVAILABLE:
        assert f"  {name:<12} " in err


def test_the_engine_refuses_an_unknown_buffer_type(tiny_llama):
    with pytest.raises(RiverError, match="NO_SUCH_TYPE"):
        _core.Engine(str(tiny_llama), 64, 64, 1, cpu_extra_bufts=["NO_SUCH_TYPE"])


@pytest.mark.parametrize("mode", ["none", "all"])
def test_the_llama_cpp_peer_follows_the_decision(tiny_llama, monkeypatch, mode):
    monkeypatch.setenv(eb.ENV, mode)
    with LlamaCppPeer(tiny_llama, n_ctx=64, n_threads=1) as peer:
        expected_off = mode == "none" and bool(AVAILABLE)
        assert peer.llama.model_params.use_extra_bufts == (not expected_off)
        assert (peer.extra_bufts_note is not None) == expected_off
        assert peer.forward(peer.tokenize("Hello world")).shape[0] > 1


@needs_repack
def test_a_type_whose_probe_crashes_is_used_by_nobody(tiny_llama, monkeypatch, fresh_memory, river_cache):
    """End to end, as on a host whose AMX faults (the stand-in on hosts without AMX):
    the probe's child for CPU_REPACK crashes, so the engine repacks nothing, llama.cpp
    loads without extra buffer types, and both still compute."""
    monkeypatch.delenv(eb.ENV, raising=False)
    monkeypatch.setattr(eb, "_child_command", child("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"))
    with RiverModel(tiny_llama, river="q4_0", n_ctx=64, progress=False) as model:
        assert model.extra_bufts.verdicts[eb.REPACK] == eb.Verdict(False, "crashed (SIGSEGV)")
        assert model.engine.repacked_tensors == 0
        model.generate("Hello", max_tokens=2)
    with LlamaCppPeer(tiny_llama, n_ctx=64, n_threads=1) as peer:
        assert not peer.llama.model_params.use_extra_bufts
        assert f"{eb.REPACK} failed the probe: crashed (SIGSEGV)" in peer.extra_bufts_note
        peer.forward(peer.tokenize("Hello world"))
