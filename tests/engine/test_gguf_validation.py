"""Hostile and damaged GGUF files: each class of damage raises RiverError naming the
file and the problem, before any tensor is used; files changed under their mapping;
NaN logits; use_mmap=False.

Every test writes its own file: a valid tiny model with a few bytes changed, located
by a small header walker written here (independent of the engine's parser).
"""

from __future__ import annotations

import os
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf_files import add_fields, write_and_close

from river_cpp import RiverError, RiverModel
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.engine.files.gguf_info import GgufInfo

pytestmark = pytest.mark.usefixtures("river_cache")

_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9
GGML_F32, GGML_F16, GGML_I32 = 0, 1, 26


# ---------------------------------------------------------------- header surgery


@dataclass
class KvAt:
    key: int  # its key's length field
    type: int  # its value type
    value: int  # its value (for arrays: the element type)


@dataclass
class TensorAt:
    name: int
    n_dims: int
    dims: int
    type: int
    offset: int


@dataclass
class Layout:
    """Where each field of a GGUF header starts."""

    kv: dict[str, KvAt] = field(default_factory=dict)
    tensors: dict[str, TensorAt] = field(default_factory=dict)


def layout(data: bytes) -> Layout:
    def u32(at: int) -> int:
        return struct.unpack_from("<I", data, at)[0]

    def u64(at: int) -> int:
        return struct.unpack_from("<Q", data, at)[0]

    def skip_value(kind: int, at: int) -> int:
        if kind == STRING:
            return at + 8 + u64(at)
        if kind == ARRAY:
            element, n, at = u32(at), u64(at + 4), at + 12
            for _ in range(n):
                at = skip_value(element, at) if element == STRING else at + _SCALAR_SIZES[element]
            return at
        return at + _SCALAR_SIZES[kind]

    out = Layout()
    n_tensors, n_kv, at = u64(8), u64(16), 24
    for _ in range(n_kv):
        start, key = at, data[at + 8 : at + 8 + u64(at)].decode()
        at += 8 + u64(at)
        out.kv[key] = KvAt(start, at, at + 4)
        at = skip_value(u32(at), at + 4)
    for _ in range(n_tensors):
        start, name = at, data[at + 8 : at + 8 + u64(at)].decode()
        at += 8 + u64(at)
        n_dims = u32(at)
        out.tensors[name] = TensorAt(start, at, at + 4, at + 4 + 8 * n_dims, at + 8 + 8 * n_dims)
        at += 4 + 8 * n_dims + 12
    return out


def damaged(src: Path, dst: Path, *patches: tuple[int, bytes], size: int | None = None) -> Path:
    """A copy of src with bytes overwritten at the given positions, cut at `size`."""
    data = bytearray(src.read_bytes())
    for at, value in patches:
        data[at : at + len(value)] = value
    dst.write_bytes(bytes(data[:size]))
    return dst


def u32(x: int) -> bytes:
    return struct.pack("<I", x)


def u64(x: int) -> bytes:
    return struct.pack("<Q", x % 2**64)


def load(path: Path, **options) -> RiverModel:
    return RiverModel(path, river=None, n_ctx=32, n_threads=1, **options)


def assert_load_raises(path: Path, message: str) -> None:
    with pytest.raises(RiverError, match=message) as error:
        load(path)
    assert str(path) in str(error.value)


@pytest.fixture(scope="module")
def base(tiny_llama) -> tuple[Path, Layout]:
    """tiny_llama (F32, 2 layers, tied embeddings) and its header layout."""
    return tiny_llama, layout(tiny_llama.read_bytes())


# ---------------------------------------------------------------- the file as a whole


def test_bad_magic(base, tmp_path):
    path, _ = base
    assert_load_raises(damaged(path, tmp_path / "magic.gguf", (0, b"GGUX")), r"not a GGUF file \(bad magic\)")
    assert_load_raises(damaged(path, tmp_path / "empty.gguf", size=0), "not a GGUF file")


@pytest.mark.parametrize(
    "version, message",
    [(1, "version 1 is not supported"), (4, "version 4 is not supported"), (3 << 24, "byte-swapped")],
)
def test_bad_version(base, tmp_path, version, message):
    path, _ = base
    assert_load_raises(damaged(path, tmp_path / "version.gguf", (4, u32(version))), f"malformed GGUF .*{message}")


@pytest.mark.parametrize("cut", [6, 20, 1000, 60_000])
def test_truncated_header(base, tmp_path, cut):
    path, _ = base
    # a cut in an array reads as an array longer than the bytes left
    assert_load_raises(
        damaged(path, tmp_path / "cut.gguf", size=cut),
        "truncated GGUF .*runs past the end of the file|malformed GGUF .*bytes left",
    )


def test_truncated_data(truncated_gguf):
    assert_load_raises(truncated_gguf, "truncated GGUF .*ends past the end of the file")


@pytest.mark.parametrize(
    "at, count, message",
    [
        (8, 2**62, "tensor count 4611686018427387904"),
        (8, 70_000, "tensor count 70000 is beyond the limit"),
        (16, 2**40, "key/value count 1099511627776"),
    ],
)
def test_huge_counts(base, tmp_path, at, count, message):
    path, _ = base
    assert_load_raises(damaged(path, tmp_path / "counts.gguf", (at, u64(count))), f"malformed GGUF .*{message}")


# ---------------------------------------------------------------- metadata


def test_huge_key_length(base, tmp_path):
    path, lay = base
    at = lay.kv["general.architecture"].key
    assert_load_raises(damaged(path, tmp_path / "key.gguf", (at, u64(2**60))), "key has length 1152921504606846976")


def test_huge_string_length(base, tmp_path):
    path, lay = base
    at = lay.kv["general.name"].value
    assert_load_raises(damaged(path, tmp_path / "string.gguf", (at, u64(2**63))), "string value has length")


def test_huge_array_length(base, tmp_path):
    path, lay = base
    at = lay.kv["tokenizer.ggml.tokens"].value + 4  # after the element type
    assert_load_raises(
        damaged(path, tmp_path / "array.gguf", (at, u64(2**61))),
        "array 'tokenizer.ggml.tokens' declares 2305843009213693952 elements",
    )


def test_unknown_value_types(base, tmp_path):
    path, lay = base
    kv = lay.kv["general.name"]
    assert_load_raises(
        damaged(path, tmp_path / "type.gguf", (kv.type, u32(99))), "key 'general.name' has unknown value type 99"
    )
    tokens = lay.kv["tokenizer.ggml.tokens"]
    assert_load_raises(damaged(path, tmp_path / "nested.gguf", (tokens.value, u32(ARRAY))), "unknown or nested type 9")


def test_duplicate_key(base, tmp_path):
    path, lay = base
    by_length: dict[int, str] = {}
    for key in lay.kv:
        if len(key) in by_length and not key.startswith("tokenizer") and not by_length[len(key)].startswith("tok"):
            first, second = by_length[len(key)], key
            break
        by_length[len(key)] = key
    at = lay.kv[second].key + 8
    assert_load_raises(damaged(path, tmp_path / "dupkey.gguf", (at, first.encode())), f"duplicate key '{first}'")


def test_non_utf8_architecture(base, tmp_path):
    """Found by scripts/fuzz_gguf.py: bytes of the file quoted in a message raised
    UnicodeDecodeError instead of RiverError."""
    path, lay = base
    at = lay.kv["general.architecture"].value + 8  # the string's bytes, "llama"
    assert_load_raises(
        damaged(path, tmp_path / "arch.gguf", (at, b"\xcc\x85\xffma")), r"unsupported architecture '\\xcc\\x85\\xffma'"
    )


def test_bad_alignment(small_gguf, tmp_path):
    lay = layout(small_gguf.read_bytes())
    path = damaged(small_gguf, tmp_path / "align.gguf", (lay.kv["general.alignment"].value, u32(48)))
    with pytest.raises(RiverError, match="general.alignment 48 is not a power of two"):
        GgufInfo.read(path)


# ---------------------------------------------------------------- the tensor table


def test_tensor_dimension_count(base, tmp_path):
    path, lay = base
    at = lay.tensors["blk.0.attn_norm.weight"].n_dims
    for n_dims in (0, 5):
        assert_load_raises(
            damaged(path, tmp_path / f"ndims{n_dims}.gguf", (at, u32(n_dims))),
            rf"tensor 'blk.0.attn_norm.weight' has {n_dims} dimensions \(1 to 4 allowed\)",
        )


@pytest.mark.parametrize("value", [0, -1, -(2**63)])
def test_non_positive_dimension(base, tmp_path, value):
    path, lay = base
    at = lay.tensors["blk.0.attn_q.weight"].dims + 8
    assert_load_raises(
        damaged(path, tmp_path / "dim.gguf", (at, u64(value))),
        f"tensor 'blk.0.attn_q.weight' has dimension 1 = {value} \\(must be positive\\)",
    )


def test_overflowing_dimensions(base, tmp_path):
    path, lay = base
    t = lay.tensors["blk.0.attn_q.weight"]
    assert_load_raises(
        damaged(path, tmp_path / "elements.gguf", (t.dims, u64(2**40)), (t.dims + 8, u64(2**40))),
        "more elements than 2\\^63",
    )
    # 2^62 float32s: 2^64 bytes, which wraps to 0 in unchecked size_t arithmetic
    norm = lay.tensors["blk.0.attn_norm.weight"]
    assert_load_raises(damaged(path, tmp_path / "bytes.gguf", (norm.dims, u64(2**62))), "byte size beyond 2\\^63")


def test_block_type_with_enormous_rows(base, tmp_path):
    """ne0 * type_size overflows before the division by the block size in ggml_nbytes."""
    path, lay = base
    norm = lay.tensors["blk.0.attn_norm.weight"]
    q8_0 = 8
    assert_load_raises(
        damaged(path, tmp_path / "rows.gguf", (norm.dims, u64(2**62)), (norm.type, u32(q8_0))),
        "tensor 'blk.0.attn_norm.weight' .* ends past the end of the file",
    )
    assert_load_raises(
        damaged(path, tmp_path / "blocks.gguf", (norm.dims, u64(2**62 + 1)), (norm.type, u32(q8_0))),
        "not a multiple of the 32-element blocks of q8_0",
    )


@pytest.mark.parametrize("ggml_type", [4, 5, 1000])  # Q4_2 and Q4_3 were removed from ggml
def test_unknown_tensor_type(base, tmp_path, ggml_type):
    path, lay = base
    at = lay.tensors["blk.0.attn_q.weight"].type
    assert_load_raises(
        damaged(path, tmp_path / "type.gguf", (at, u32(ggml_type))),
        f"tensor 'blk.0.attn_q.weight' has unknown ggml type {ggml_type}",
    )


def test_misaligned_offset(base, tmp_path):
    path, lay = base
    at = lay.tensors["blk.1.ffn_up.weight"].offset
    offset = struct.unpack_from("<Q", path.read_bytes(), at)[0]
    assert_load_raises(
        damaged(path, tmp_path / "misaligned.gguf", (at, u64(offset + 2))),
        f"tensor 'blk.1.ffn_up.weight' has offset {offset + 2}, not a multiple of the alignment 32",
    )


@pytest.mark.parametrize("offset", [2**40, 2**64 - 32])
def test_offset_outside_the_file(base, tmp_path, offset):
    path, lay = base
    at = lay.tensors["output_norm.weight"].offset
    assert_load_raises(
        damaged(path, tmp_path / "outside.gguf", (at, u64(offset))),
        "truncated GGUF .*tensor 'output_norm.weight' .* ends past the end of the file",
    )


def test_duplicate_tensor_names(base, tmp_path):
    path, lay = base
    at = lay.tensors["blk.0.attn_k.weight"].name + 8
    assert_load_raises(
        damaged(path, tmp_path / "dup.gguf", (at, b"blk.0.attn_q.weight")), "duplicate tensor 'blk.0.attn_q.weight'"
    )


# ---------------------------------------------------------------- what the architecture needs


def test_missing_tensor(base, tmp_path):
    path, lay = base
    at = lay.tensors["blk.1.ffn_up.weight"].name + 8
    assert_load_raises(
        damaged(path, tmp_path / "missing.gguf", (at, b"blk.1.ffn_uq.weight")), "missing tensor 'blk.1.ffn_up.weight'"
    )


def test_wrong_shape(base, tmp_path):
    path, lay = base
    at = lay.tensors["blk.0.attn_q.weight"].dims + 8
    assert_load_raises(
        damaged(path, tmp_path / "shape.gguf", (at, u64(32))),
        r"tensor 'blk.0.attn_q.weight' has shape \[64, 32\], expected dimension 1 = 64",
    )


@pytest.mark.slow
def test_extra_dimension(base, tmp_path):
    """A norm stored as [64, 2] would be read as its first 64 values: refused."""
    path, _ = base
    bad = rewritten(path, tmp_path / "dims.gguf", {"output_norm.weight": np.ones((2, 64), np.float32)})
    assert_load_raises(bad, r"tensor 'output_norm.weight' has shape \[64, 2\], expected 1 dimensions")


def rewritten(src: Path, dst: Path, replace: dict[str, np.ndarray]) -> Path:
    """src written again by gguf-py with some tensors' values replaced."""
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, reader.fields["general.architecture"].contents())
    add_fields(
        writer, [f for key, f in reader.fields.items() if not key.startswith("GGUF.") and key != "general.architecture"]
    )
    for t in reader.tensors:
        writer.add_tensor(t.name, np.array(replace.get(t.name, t.data)), raw_dtype=t.tensor_type)
    write_and_close(writer)
    return dst


def test_vector_of_wrong_type(base, tmp_path):
    path, lay = base
    at = lay.tensors["blk.0.attn_norm.weight"].type
    assert_load_raises(
        damaged(path, tmp_path / "f16norm.gguf", (at, u32(GGML_F16))),
        "tensor 'blk.0.attn_norm.weight' has type f16, .*norms, biases and rope factors must be f32",
    )


def test_matrix_of_unusable_type(base, tmp_path):
    path, lay = base
    at = lay.tensors["blk.0.attn_v.weight"].type
    assert_load_raises(
        damaged(path, tmp_path / "i32.gguf", (at, u32(GGML_I32))),
        "tensor 'blk.0.attn_v.weight' has type i32, which the engine cannot use for a matrix",
    )


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("llama.rope.dimension_count", 1000, "rope.dimension_count 1000 must be even and at most the head size 16"),
        ("llama.rope.dimension_count", 15, "rope.dimension_count 15 must be even"),
        ("llama.block_count", 2**31, r"invalid llama.block_count = 2147483648 \(must be in \[1, 1048576\]\)"),
        ("llama.block_count", 100, "block_count 100 but only 20 tensors"),
        ("llama.attention.head_count", 0, "invalid attention head counts"),
        ("llama.feed_forward_length", 0, "invalid llama.feed_forward_length = 0"),
    ],
)
def test_bad_hyperparameters(base, tmp_path, key, value, message):
    path, lay = base
    assert_load_raises(damaged(path, tmp_path / "hparams.gguf", (lay.kv[key].value, u32(value))), message)


# ---------------------------------------------------------------- rivers


@pytest.fixture
def river_of_tiny_llama(tiny_llama) -> Path:
    with RiverModel(tiny_llama, river="q8_0", n_ctx=32) as model:
        return model.river_path


def test_damaged_river(tiny_llama, river_of_tiny_llama, tmp_path):
    lay = layout(river_of_tiny_llama.read_bytes())
    bad = damaged(
        river_of_tiny_llama, tmp_path / "river.gguf", (lay.tensors["blk.1.ffn_down.weight"].offset, u64(2**40))
    )
    with pytest.raises(RiverError, match=f"truncated GGUF {bad}: tensor 'blk.1.ffn_down.weight'"):
        RiverModel(tiny_llama, river=bad)
    missing = damaged(
        river_of_tiny_llama,
        tmp_path / "missing.gguf",
        (lay.tensors["blk.1.ffn_down.weight"].name + 8, b"blk.1.ffn_down.weighs"),
    )
    with pytest.raises(RiverError, match=f"missing tensor 'blk.1.ffn_down.weight' in {missing}"):
        RiverModel(tiny_llama, river=missing)


def test_river_made_for_another_backbone(tiny_llama, river_of_tiny_llama, tmp_path):
    """Same shapes, another rope base: the river's copied architecture keys tell."""
    lay = layout(tiny_llama.read_bytes())
    other = damaged(
        tiny_llama, tmp_path / "other.gguf", (lay.kv["llama.rope.freq_base"].value, struct.pack("<f", 500000.0))
    )
    with pytest.raises(
        RiverError,
        match="does not match its backbone: 'llama.rope.freq_base' is 10000.000000 in the "
        "river, 500000.000000 in the backbone",
    ):
        RiverModel(other, river=river_of_tiny_llama)


# ---------------------------------------------------------------- at run time


def _poison(path: Path, tensor: str, dst: Path, value: bytes) -> Path:
    """A copy of path with `value` written at the start of `tensor`'s data."""
    return damaged(path, dst, (GgufInfo.read(path).tensor(tensor).offset, value))


def test_nan_logits_name_the_backbone(tiny_llama, tmp_path):
    bad = _poison(tiny_llama, "output_norm.weight", tmp_path / "nan.gguf", struct.pack("<f", float("nan")))
    with load(bad) as model:
        with pytest.raises(RiverError, match=f"non-finite logits .*the backbone weights \\({bad}\\)"):
            model.forward([1, 2, 3])
        assert model.n_past == 0


def test_nan_logits_name_the_river(tiny_llama, river_of_tiny_llama, tmp_path):
    # the first Q8_0 block's F16 scale becomes NaN
    bad = _poison(river_of_tiny_llama, "blk.1.ffn_down.weight", tmp_path / "nan-river.gguf", b"\x00\x7e")
    with RiverModel(tiny_llama, river=bad, policy=ExitPolicy.never(), prefill="exit", n_ctx=32) as model:
        model.forward([1, 2])
        with pytest.raises(RiverError, match=f"non-finite logits .*the river weights \\({bad}, after 1 backbone"):
            model.forward([3], policy=ExitPolicy.at_layer(1))
        assert model.n_past == 2
        assert np.isfinite(model.forward([3], policy=ExitPolicy.never())).all()


def test_file_changed_under_the_mapping(tiny_llama, tmp_path):
    path = shutil.copy(tiny_llama, tmp_path / "model.gguf")
    with load(path) as model, load(path, use_mmap=False) as in_memory:
        model.forward([1])
        model.check_files()
        stat = os.stat(path)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        with pytest.raises(RiverError, match=f"model file {path} changed since it was loaded .*modified"):
            model.forward([2])
        with pytest.raises(RiverError, match="changed since it was loaded"):
            model.check_files()
        assert model.n_past == 1
        in_memory.check_files()  # read into memory: immune
        in_memory.forward([1, 2])


def test_file_replaced_or_removed(tiny_llama, river_of_tiny_llama, tmp_path):
    river = shutil.copy(river_of_tiny_llama, tmp_path / "river.gguf")
    with RiverModel(tiny_llama, river=river, n_ctx=32) as model:
        model.forward([1])
        shutil.copy(river, tmp_path / "new.gguf")
        os.replace(tmp_path / "new.gguf", river)
        with pytest.raises(RiverError, match=f"model file {river} changed since it was loaded .*replaced"):
            model.forward([2])
        os.remove(river)
        with pytest.raises(RiverError, match=f"model file {river} is gone"):
            model.check_files()


def test_use_mmap_false_gives_the_same_logits(tiny_llama):
    ids = [1, 5, 9, 200, 7]
    results = []
    for use_mmap in (True, False):
        with RiverModel(
            tiny_llama, river="q8_0", policy=ExitPolicy.at_layer(1), prefill="exit", n_ctx=32, use_mmap=use_mmap
        ) as model:
            results.append((model.forward(ids), model.forward([3])))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
