"""_core.gguf_info and GgufInfo against gguf-py's GGUFReader, on the fixtures and the demo model."""

from __future__ import annotations

import time

import gguf
import pytest

from river_cpp import RiverError
from river_cpp.engine import _core
from river_cpp.engine.files.gguf_info import ArraySummary, GgufInfo


def assert_matches_reader(info: GgufInfo, path, *, max_array):
    reader = gguf.GGUFReader(path)
    assert set(info.metadata) == {k for k in reader.fields if not k.startswith("GGUF.")}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            element = field.types[-1].name.lower()
            assert info.types[key] == f"array[{element}]"
            if len(field.data) > max_array:
                assert info.metadata[key] == ArraySummary(element, len(field.data)), key
                continue
        else:
            assert info.types[key] == kind.name.lower()
        assert info.metadata[key] == field.contents(), key
    assert len(info.tensors) == len(reader.tensors)
    for ours, theirs in zip(info.tensors, reader.tensors):
        assert ours.name == theirs.name
        assert ours.type == theirs.tensor_type.name.lower()
        assert ours.shape == tuple(int(n) for n in theirs.shape)
        assert ours.n_bytes == theirs.n_bytes
        assert ours.offset == theirs.data_offset
    assert info.data_offset == reader.data_offset
    assert info.alignment == reader.alignment
    assert info.file_size == path.stat().st_size


@pytest.mark.parametrize("max_array", [1024, None])
def test_small_gguf_matches_reader(small_gguf, max_array):
    info = GgufInfo.read(small_gguf, max_array=max_array)
    assert_matches_reader(info, small_gguf, max_array=max_array or 2**63)
    assert info.alignment == 64 and info.version == 3
    assert info.metadata["test.int64s"] == [-1, 2**40]
    assert info.metadata["test.strings"] == ["a", "ünïcode", "<0x0A>"]
    assert info.tensor("cube.weight").shape == (64, 3, 2)
    assert info.tensor("nope") is None


@pytest.mark.parametrize(
    "fixture", ["tiny_llama", "tiny_gemma3", pytest.param("demo_model", marks=pytest.mark.real_model)]
)
@pytest.mark.slow
def test_models_match_reader(fixture, request):
    path = request.getfixturevalue(fixture)
    info = GgufInfo.read(path)
    assert_matches_reader(info, path, max_array=1024)
    assert info.metadata["tokenizer.ggml.tokens"] == ArraySummary("string", 49152)
    assert info.arch == info.get("general.architecture")
    assert info.n_layer == info.metadata[f"{info.arch}.block_count"]
    assert info.tensor_bytes == sum(t.n_bytes for t in gguf.GGUFReader(path).tensors)


@pytest.mark.slow
def test_full_vocabulary_on_request(tiny_llama):
    info = GgufInfo.read(tiny_llama, max_array=None)
    tokens = gguf.GGUFReader(tiny_llama).fields["tokenizer.ggml.tokens"].contents()
    assert info.metadata["tokenizer.ggml.tokens"] == tokens


@pytest.mark.real_model
def test_fast_on_the_demo_backbone(demo_backbone):
    # the header only: a few ms whatever the file size (the F16 demo backbone is 270 MB)
    _core.gguf_info(str(demo_backbone))
    best = min(_timed(lambda: _core.gguf_info(str(demo_backbone))) for _ in range(3))
    assert best < 0.1, best


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def test_raw_dict_shape(tiny_llama):
    raw = _core.gguf_info(str(tiny_llama), 0)
    assert {"version", "alignment", "data_offset", "file_size", "metadata", "types", "tensors"} <= set(raw)
    assert raw["metadata"]["tokenizer.ggml.tokens"] == {"element_type": "string", "length": 49152}
    assert set(raw["tensors"][0]) == {"name", "type", "shape", "n_bytes", "offset"}


def test_malformed_files_raise(not_a_gguf, truncated_gguf, tmp_path):
    with pytest.raises(RiverError, match="not a GGUF"):
        GgufInfo.read(not_a_gguf)
    with pytest.raises(RiverError, match="truncated GGUF"):
        GgufInfo.read(truncated_gguf)
    with pytest.raises(RiverError, match="cannot open"):
        GgufInfo.read(tmp_path / "missing.gguf")
