"""convert_to_f16: tensors dequantized exactly, metadata kept, output usable by llama.cpp."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from llama_run import cpu_llama

from river_cpp.engine.files.convert import convert_to_f16

F16 = gguf.GGMLQuantizationType.F16
F32 = gguf.GGMLQuantizationType.F32
PROMPT = "The quick brown fox jumps over the lazy dog."


def llama_cpp_logits(path: Path, text: str = PROMPT) -> np.ndarray:
    llm = cpu_llama(path, n_ctx=256, logits_all=True, verbose=False)
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


@pytest.fixture(scope="module")
def readers(quantized_llama, converted_llama) -> tuple[gguf.GGUFReader, gguf.GGUFReader]:
    """Source and converted file, parsed once (gguf-py takes seconds over a 49k-token vocab)."""
    return gguf.GGUFReader(quantized_llama), gguf.GGUFReader(converted_llama)


@pytest.mark.slow
def test_tensors_are_dequantized_in_order(readers):
    source, converted = readers
    assert [t.name for t in converted.tensors] == [t.name for t in source.tensors]
    assert {t.tensor_type for t in source.tensors if len(t.shape) >= 2} <= {
        gguf.GGMLQuantizationType.Q8_0,
        gguf.GGMLQuantizationType.Q4_0,
    }
    for source_tensor, converted_tensor in zip(source.tensors, converted.tensors):
        assert_converted_tensor(source_tensor, converted_tensor)


@pytest.mark.slow
def test_metadata_is_preserved(readers):
    assert_same_metadata(*readers)


def test_llama_cpp_runs_the_output(quantized_llama, converted_llama):
    source, converted = llama_cpp_logits(quantized_llama), llama_cpp_logits(converted_llama)
    assert converted.shape == source.shape
    assert np.isfinite(converted).all()
    # The quantized run also rounds activations to 8 bits, so only the choice is compared.
    assert (converted.argmax(axis=1) == source.argmax(axis=1)).mean() >= 0.8


@pytest.mark.slow
def test_f16_source_gives_identical_llama_cpp_logits(tiny_llama4, tmp_path):
    converted = convert_to_f16(tiny_llama4, tmp_path / "copy.gguf", progress=False)
    np.testing.assert_array_equal(llama_cpp_logits(converted), llama_cpp_logits(tiny_llama4))


# ---------------------------------------------------------------- other types and layouts


def test_mixed_types_alignment_and_shapes(small_gguf, tmp_path):
    converted_path = convert_to_f16(small_gguf, tmp_path / "small.F16.gguf", progress=False)
    source, converted = gguf.GGUFReader(small_gguf), gguf.GGUFReader(converted_path)
    assert converted.alignment == 64
    assert converted.data_offset % 64 == 0
    assert [list(t.shape) for t in converted.tensors] == [[64, 3, 2], [32, 5], [7, 3], [33], [64]]
    for source_tensor, converted_tensor in zip(source.tensors, converted.tensors):
        assert_converted_tensor(source_tensor, converted_tensor)
        assert converted_tensor.data_offset % 64 == 0
    assert_same_metadata(source, converted)


def test_overwrites_destination_and_leaves_no_temporary_files(small_gguf, tmp_path):
    out = tmp_path / "out" / "model.gguf"
    out.parent.mkdir()
    out.write_text("old contents")
    assert convert_to_f16(small_gguf, out, progress=False) == out
    assert gguf.GGUFReader(out).tensors
    assert list(out.parent.iterdir()) == [out]


def test_progress_bar_can_be_silenced(small_gguf, tmp_path, capsys):
    convert_to_f16(small_gguf, tmp_path / "quiet.gguf", progress=False)
    assert capsys.readouterr().err == ""
    convert_to_f16(small_gguf, tmp_path / "loud.gguf", progress=True)
    assert "tensor" in capsys.readouterr().err


# ---------------------------------------------------------------- errors


def test_missing_source(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.gguf"):
        convert_to_f16(tmp_path / "missing.gguf", tmp_path / "out.gguf")


@pytest.mark.parametrize("broken", ["not_a_gguf", pytest.param("truncated_gguf", marks=pytest.mark.slow)])
def test_unreadable_source(broken, request, tmp_path):
    source = request.getfixturevalue(broken)
    with pytest.raises(ValueError, match="not a readable GGUF file"):
        convert_to_f16(source, tmp_path / "out.gguf", progress=False)
    assert list(tmp_path.iterdir()) == []
