"""GGUF conversions done in Python with gguf-py: dequantizing a release to F16.

This module rewrites whole files (metadata and tensors); it does not build river
weights — quantizing a backbone into a river is the C++ engine's job (river_build).
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path
from typing import Union

import gguf
import numpy as np
from tqdm import tqdm

logger = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]

# Dequantize this many values at a time, so a large token embedding never exists
# as a whole F32 array next to its F16 copy (a 1.5B model's is ~230M values).
_CHUNK_VALUES = 1 << 22


# Types a release can be converted to: every tensor of two or more dimensions whose
# rows the type can hold is stored as it (others as F16); 1-D tensors stay F32.
CONVERT_TYPES = {
    "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "q4_0": (gguf.GGMLQuantizationType.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
}


def convert(src: PathLike, dst: PathLike, *, type: str = "f16", progress: bool = True) -> Path:
    """Write a copy of the GGUF file `src` with its matrices in `type` (one of
    CONVERT_TYPES) to `dst` and return `dst`, as convert_to_f16 does for F16 (a Q8_0
    or Q4_0 copy of a release: its dequantized values quantized again)."""
    if type not in CONVERT_TYPES:
        raise ValueError(f"type must be one of {', '.join(CONVERT_TYPES)}, got {type!r}")
    src, dst = Path(src), Path(dst)
    reader = _open_gguf(src)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        _write(reader, tmp, CONVERT_TYPES[type], progress=progress)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return dst


def convert_to_f16(src: PathLike, dst: PathLike, *, progress: bool = True) -> Path:
    """Write an F16 copy of the GGUF file `src` to `dst` and return `dst`.

    Every tensor with two or more dimensions is dequantized and stored as F16;
    1-D tensors (norms, biases) are stored as F32. Tensor names, shapes and order
    and all metadata are kept, except general.file_type, which becomes MOSTLY_F16.
    The file is written next to `dst` under a temporary name and renamed into
    place, so `dst` is never seen half-written.

    Raises FileNotFoundError when `src` does not exist and ValueError when it is
    not a readable GGUF file.
    """
    src, dst = Path(src), Path(dst)
    reader = _open_gguf(src)
    dst.parent.mkdir(parents=True, exist_ok=True)
    # A name of our own rather than mkstemp's, whose 0600 mode would outlive the rename.
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        _write_f16(reader, tmp, progress=progress)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return dst


def _write(reader: gguf.GGUFReader, path: Path, target, *, progress: bool) -> None:
    """Like _write_f16, with matrices of `target` (a CONVERT_TYPES value) where their rows fit it."""
    qtype, file_type = target
    if qtype == gguf.GGMLQuantizationType.F16:
        _write_f16(reader, path, progress=progress)
        return
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(path, arch)

    def stored(tensor: gguf.ReaderTensor) -> bool:
        return len(tensor.shape) >= 2 and int(tensor.shape[0]) % block == 0

    try:
        _copy_metadata(reader, writer)
        writer.add_file_type(file_type)
        for tensor in reader.tensors:
            if stored(tensor):
                shape = gguf.quants.quant_shape_to_byte_shape(_numpy_shape(tensor), qtype)
                n_bytes = int(np.prod(shape))
                writer.add_tensor_info(tensor.name, shape, np.dtype(np.uint8), n_bytes, raw_dtype=qtype)
            else:
                out_dtype = _output_dtype(tensor)
                writer.add_tensor_info(
                    tensor.name, _numpy_shape(tensor), out_dtype, int(tensor.n_elements) * out_dtype.itemsize
                )
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        bar = tqdm(reader.tensors, desc=f"Converting to {qtype.name}", unit="tensor", disable=not progress)
        for tensor in bar:
            if stored(tensor):
                values = _dequantize(tensor, np.dtype(np.float32))
                writer.write_tensor_data(gguf.quants.quantize(values, qtype))
            else:
                writer.write_tensor_data(_dequantize(tensor, _output_dtype(tensor)))
    finally:
        writer.close()


def _open_gguf(path: Path) -> gguf.GGUFReader:
    if not path.exists():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, IndexError, KeyError, OSError) as e:  # what a malformed file raises in gguf-py
        raise ValueError(f"{path} is not a readable GGUF file: {e}") from e
    if reader.byte_order == "S":
        raise ValueError(f"{path} is a big-endian GGUF file, which is not supported")
    if gguf.Keys.General.ARCHITECTURE not in reader.fields:
        raise ValueError(f"{path} has no {gguf.Keys.General.ARCHITECTURE} key; is it a model?")
    return reader


def _write_f16(reader: gguf.GGUFReader, path: Path, *, progress: bool) -> None:
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(path, arch)
    try:
        _copy_metadata(reader, writer)
        writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        for tensor in reader.tensors:
            out_dtype = _output_dtype(tensor)
            n_bytes = int(tensor.n_elements) * out_dtype.itemsize
            writer.add_tensor_info(tensor.name, _numpy_shape(tensor), out_dtype, n_bytes)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        bar = tqdm(reader.tensors, desc="Converting to F16", unit="tensor", disable=not progress)
        for tensor in bar:
            writer.write_tensor_data(_dequantize(tensor, _output_dtype(tensor)))
    finally:
        writer.close()


# Keys not copied as plain values: GGUFWriter writes the architecture it is given,
# the alignment must go through add_custom_alignment so the writer pads by it too,
# and general.file_type is replaced. (The reader's GGUF.* fields are the header.)
_KEYS_WRITTEN_BY_WRITER = {
    gguf.Keys.General.ARCHITECTURE,
    gguf.Keys.General.ALIGNMENT,
    gguf.Keys.General.FILE_TYPE,
}


def _copy_metadata(reader: gguf.GGUFReader, writer: gguf.GGUFWriter) -> None:
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in _KEYS_WRITTEN_BY_WRITER:
            continue
        value_type = field.types[0]
        if value_type != gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, field.contents(), value_type)
        elif len(field.types) != 2:
            # gguf-py's reader flattens arrays of arrays; writing that back would corrupt it.
            logger.warning("skipping metadata key %s: nested arrays are not supported", key)
        elif not field.data:
            # gguf-py refuses to write an empty array.
            logger.warning("skipping metadata key %s: empty array", key)
        else:
            writer.add_key_value(key, field.contents(), value_type, sub_type=field.types[1])
    if gguf.Keys.General.ALIGNMENT in reader.fields:
        writer.add_custom_alignment(int(reader.alignment))


def _output_dtype(tensor: gguf.ReaderTensor) -> np.dtype:
    return np.dtype(np.float16 if len(tensor.shape) >= 2 else np.float32)


def _numpy_shape(tensor: gguf.ReaderTensor) -> tuple[int, ...]:
    # tensor.shape is ggml's ne (fastest-varying first); numpy's order is the reverse.
    return tuple(int(n) for n in reversed(tensor.shape))


def _dequantize(tensor: gguf.ReaderTensor, out_dtype: np.dtype) -> np.ndarray:
    """The tensor's values as `out_dtype`, in numpy shape, converted a chunk of rows at a time."""
    row_length = int(tensor.shape[0])
    # Rows of raw data: values for float types, blocks' bytes for quantized ones.
    raw_rows = tensor.data.reshape(-1, tensor.data.shape[-1])
    out = np.empty((raw_rows.shape[0], row_length), dtype=out_dtype)
    rows_per_chunk = max(1, _CHUNK_VALUES // row_length)
    for start in range(0, raw_rows.shape[0], rows_per_chunk):
        chunk = raw_rows[start : start + rows_per_chunk]
        try:
            out[start : start + rows_per_chunk] = gguf.quants.dequantize(chunk, tensor.tensor_type)
        except NotImplementedError as e:
            raise ValueError(f"cannot dequantize tensor {tensor.name} of type {tensor.tensor_type.name}") from e
    return out.reshape(_numpy_shape(tensor))
