"""convert_to_f16: tensors dequantized exactly, metadata kept, output usable by llama.cpp."""

from __future__ import annotations

from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest

from river_cpp.convert import convert_to_f16

F16 = gguf.GGMLQuantizationType.F16
F32 = gguf.GGMLQuantizationType.F32
PROMPT = "The quick brown fox jumps over the lazy dog."


def llama_cpp_logits(path: Path, text: str = PROMPT) -> np.ndarray:
    llm = llama_cpp.Llama(str(path), n_ctx=256, logits_all=True, verbose=False)
    ids = llm.tokenize(text.encode())
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)])


def assert_converted_tensor(source: gguf.ReaderTensor, converted: gguf.ReaderTensor) -> None:
    """`converted` is `source` dequantized: F16 (rounded once) for matrices, F32 for vectors."""
    assert converted.name == source.name
    assert list(converted.shape) == list(source.shape)  # ggml ne order
    expected = gguf.quants.dequantize(source.data, source.tensor_type)
    if len(source.shape) >= 2:
        assert converted.tensor_type == F16, source.name
        np.testing.assert_array_equal(converted.data, expected.astype(np.float16), err_msg=source.name)
    else:
        assert converted.tensor_type == F32, source.name
        np.testing.assert_array_equal(converted.data, expected, err_msg=source.name)


def assert_same_metadata(source: gguf.GGUFReader, converted: gguf.GGUFReader) -> None:
    """Same keys, types and values, except the header counts and general.file_type."""
    ignored = {gguf.Keys.General.FILE_TYPE, "GGUF.tensor_count", "GGUF.kv_count"}
    keys = [key for key in source.fields if key not in ignored]
    assert sorted(keys) == sorted(key for key in converted.fields if key not in ignored)
    for key in keys:
        assert converted.fields[key].types == source.fields[key].types, key
        assert converted.fields[key].contents() == source.fields[key].contents(), key
    assert converted.fields[gguf.Keys.General.FILE_TYPE].contents() == gguf.LlamaFileType.MOSTLY_F16


# ---------------------------------------------------------------- quantized tiny llamas


@pytest.fixture(scope="module", params=["q8_0", "q4_0"])
def quantized_llama(request, make_tiny_gguf) -> Path:
    return make_tiny_gguf(f"tiny_llama_{request.param}", dtype=request.param)


@pytest.fixture(scope="module")
def converted_llama(quantized_llama, tmp_path_factory) -> Path:
    return convert_to_f16(quantized_llama, tmp_path_factory.mktemp("f16") / "model.F16.gguf", progress=False)


def test_tensors_are_dequantized_in_order(quantized_llama, converted_llama):
    source, converted = gguf.GGUFReader(quantized_llama), gguf.GGUFReader(converted_llama)
    assert [t.name for t in converted.tensors] == [t.name for t in source.tensors]
    assert {t.tensor_type for t in source.tensors if len(t.shape) >= 2} <= {
        gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0
    }
    for source_tensor, converted_tensor in zip(source.tensors, converted.tensors):
        assert_converted_tensor(source_tensor, converted_tensor)


def test_metadata_is_preserved(quantized_llama, converted_llama):
    assert_same_metadata(gguf.GGUFReader(quantized_llama), gguf.GGUFReader(converted_llama))


def test_llama_cpp_runs_the_output(quantized_llama, converted_llama):
    source, converted = llama_cpp_logits(quantized_llama), llama_cpp_logits(converted_llama)
    assert converted.shape == source.shape
    assert np.isfinite(converted).all()
    # The quantized run also rounds activations to 8 bits, so only the choice is compared.
    assert (converted.argmax(axis=1) == source.argmax(axis=1)).mean() >= 0.8


def test_f16_source_gives_identical_llama_cpp_logits(tiny_llama4, tmp_path):
    converted = convert_to_f16(tiny_llama4, tmp_path / "copy.gguf", progress=False)
    np.testing.assert_array_equal(llama_cpp_logits(converted), llama_cpp_logits(tiny_llama4))


# ---------------------------------------------------------------- other types and layouts


def write_mixed_gguf(path: Path) -> Path:
    """A GGUF with a custom alignment, assorted metadata types, a 3-D tensor, BF16, and
    vectors stored as F16 and Q8_0 — what the tiny llamas do not cover."""
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_custom_alignment(64)
    writer.add_key_value("test.uint8", 7, gguf.GGUFValueType.UINT8)
    writer.add_key_value("test.float64", 0.1, gguf.GGUFValueType.FLOAT64)
    writer.add_key_value("test.int64s", [-1, 2**40], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT64)
    writer.add_key_value("test.flags", [True, False], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.BOOL)
    writer.add_array("test.strings", ["a", "ünïcode", "<0x0A>"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    tensors = {
        "cube.weight": (rng.normal(size=(2, 3, 64)), gguf.GGMLQuantizationType.Q8_0),
        "bf16.weight": (rng.normal(size=(5, 32)), gguf.GGMLQuantizationType.BF16),
        "f32.weight": (rng.normal(size=(3, 7)), F32),
        "f16_vector.weight": (rng.normal(size=33), F16),
        "q8_0_vector.weight": (rng.normal(size=64), gguf.GGMLQuantizationType.Q8_0),
    }
    for name, (values, qtype) in tensors.items():
        writer.add_tensor(name, gguf.quants.quantize(values.astype(np.float32), qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_mixed_types_alignment_and_shapes(tmp_path):
    source_path = write_mixed_gguf(tmp_path / "mixed.gguf")
    converted_path = convert_to_f16(source_path, tmp_path / "mixed.F16.gguf", progress=False)
    source, converted = gguf.GGUFReader(source_path), gguf.GGUFReader(converted_path)
    assert converted.alignment == 64
    assert converted.data_offset % 64 == 0
    assert [list(t.shape) for t in converted.tensors] == [[64, 3, 2], [32, 5], [7, 3], [33], [64]]
    for source_tensor, converted_tensor in zip(source.tensors, converted.tensors):
        assert_converted_tensor(source_tensor, converted_tensor)
        assert converted_tensor.data_offset % 64 == 0
    assert_same_metadata(source, converted)


def test_overwrites_destination_and_leaves_no_temporary_files(tiny_llama, tmp_path):
    out = tmp_path / "out" / "model.gguf"
    out.parent.mkdir()
    out.write_text("old contents")
    assert convert_to_f16(tiny_llama, out, progress=False) == out
    assert gguf.GGUFReader(out).tensors
    assert list(out.parent.iterdir()) == [out]


def test_progress_bar_can_be_silenced(tiny_llama, tmp_path, capsys):
    convert_to_f16(tiny_llama, tmp_path / "quiet.gguf", progress=False)
    assert capsys.readouterr().err == ""
    convert_to_f16(tiny_llama, tmp_path / "loud.gguf", progress=True)
    assert "tensor" in capsys.readouterr().err


# ---------------------------------------------------------------- errors


def test_missing_source(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.gguf"):
        convert_to_f16(tmp_path / "missing.gguf", tmp_path / "out.gguf")


@pytest.mark.parametrize("broken", ["not_a_gguf", "truncated_gguf"])
def test_unreadable_source(broken, request, tmp_path):
    source = request.getfixturevalue(broken)
    with pytest.raises(ValueError, match="not a readable GGUF file"):
        convert_to_f16(source, tmp_path / "out.gguf", progress=False)
    assert list(tmp_path.iterdir()) == []
