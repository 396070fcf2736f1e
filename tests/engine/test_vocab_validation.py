"""Hostile vocabularies: every class that kills the process inside llama.cpp (found by
reading llama-vocab.cpp and by scripts/fuzz_gguf.py's vocab target) raises RiverError
from the Tokenizer and from RiverModel before llama.cpp sees the file; consistency
checks that llama.cpp only warns or throws about give the same clear error.

Every test writes its own file: a 1-layer llama with a small vocabulary of each
type llama.cpp knows (SPM, BPE, WPM, UGM, RWKV) built here, then one lie.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Optional

import gguf
import numpy as np
import pytest
from gguf_files import tiny_llama_hparams, tiny_llama_shapes, write_and_close

from river_cpp import RiverError, RiverModel
from river_cpp.engine._core import check_vocabulary
from river_cpp.engine.compute.tokenizer import Tokenizer

pytestmark = pytest.mark.usefixtures("river_cache")

T = gguf.GGUFValueType
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6
Fields = dict[str, tuple[Any, gguf.GGUFValueType, Optional[gguf.GGUFValueType]]]


# ---------------------------------------------------------------- files


def write_model(path: Path, fields: Fields, *, n_rows: Optional[int] = None) -> Path:
    """The tiny llama (one layer) with the given tokenizer.* fields; its embedding has
    n_rows rows (default: one per token)."""
    tokens = fields["tokenizer.ggml.tokens"][0]
    writer = gguf.GGUFWriter(path, "llama")
    for key, value in tiny_llama_hparams(1).items():
        kind = gguf.GGUFValueType.UINT32 if isinstance(value, int) else gguf.GGUFValueType.FLOAT32
        writer.add_key_value(f"llama.{key}", value, kind)
    for key, (value, kind, sub) in fields.items():
        writer.add_key_value(key, value, kind, sub_type=sub)
    rng = np.random.default_rng(0)
    for name, shape in tiny_llama_shapes(len(tokens) if n_rows is None else n_rows, 1).items():
        writer.add_tensor(name, rng.normal(0, 0.3, shape).astype(np.float32))
    write_and_close(writer)
    return path


def strings(values: list[bytes]) -> tuple[list[bytes], gguf.GGUFValueType, gguf.GGUFValueType]:
    return values, T.ARRAY, T.STRING


def ints(values: list[int]) -> tuple[list[int], gguf.GGUFValueType, gguf.GGUFValueType]:
    return values, T.ARRAY, T.INT32


def floats(values: list[float]) -> tuple[list[float], gguf.GGUFValueType, gguf.GGUFValueType]:
    return values, T.ARRAY, T.FLOAT32


def u32(value: int) -> tuple[int, gguf.GGUFValueType, None]:
    return value, T.UINT32, None


def text(value: str) -> tuple[str, gguf.GGUFValueType, None]:
    return value, T.STRING, None


def flag(value: bool) -> tuple[bool, gguf.GGUFValueType, None]:
    return value, T.BOOL, None


def spm() -> Fields:
    """llama (SPM): specials, the 256 byte tokens, letters and a few pieces."""
    pieces = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["▁", "▁t", "▁a", "he", "▁the", "▁w", "or", "ld"]
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{b:02X}>".encode() for b in range(256)]
    tokens += [p.encode() for p in pieces]
    return {
        "tokenizer.ggml.model": text("llama"),
        "tokenizer.ggml.tokens": strings(tokens),
        "tokenizer.ggml.scores": floats([0.0] * 259 + [-float(i) for i in range(len(pieces))]),
        "tokenizer.ggml.token_type": ints([UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256 + [NORMAL] * len(pieces)),
        "tokenizer.ggml.bos_token_id": u32(1),
        "tokenizer.ggml.eos_token_id": u32(2),
        "tokenizer.ggml.unknown_token_id": u32(0),
    }


def bpe() -> Fields:
    """gpt2 (BPE): a few byte-level tokens and merges that build "hello"."""
    tokens = [b"<|endoftext|>", b"h", b"e", b"l", b"o", b"\xc4\x8a", b"he", b"ll", b"hell", b"hello"]
    return {
        "tokenizer.ggml.model": text("gpt2"),
        "tokenizer.ggml.pre": text("default"),
        "tokenizer.ggml.tokens": strings(tokens),
        "tokenizer.ggml.token_type": ints([CONTROL] + [NORMAL] * (len(tokens) - 1)),
        "tokenizer.ggml.merges": strings([b"h e", b"l l", b"he ll", b"hell o"]),
        "tokenizer.ggml.bos_token_id": u32(0),
        "tokenizer.ggml.eos_token_id": u32(0),
    }


def wpm() -> Fields:
    """bert (WPM)."""
    pieces = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["▁" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens = [b"[PAD]", b"[UNK]", b"[CLS]", b"[SEP]"] + [p.encode() for p in pieces]
    return {
        "tokenizer.ggml.model": text("bert"),
        "tokenizer.ggml.tokens": strings(tokens),
        "tokenizer.ggml.token_type": ints([CONTROL, UNKNOWN, CONTROL, CONTROL] + [NORMAL] * len(pieces)),
        "tokenizer.ggml.padding_token_id": u32(0),
        "tokenizer.ggml.unknown_token_id": u32(1),
        "tokenizer.ggml.bos_token_id": u32(2),
        "tokenizer.ggml.seperator_token_id": u32(3),
    }


def charsmap(nodes: dict[int, int], replacements: bytes = b"\0") -> tuple[list[int], Any, Any]:
    """A precompiled_charsmap of 256 XCDA nodes (zero unless given) and its replacement strings."""
    array = [nodes.get(i, 0) for i in range(256)]
    blob = struct.pack("<I", 4 * len(array)) + struct.pack(f"<{len(array)}I", *array) + replacements
    return list(blob), T.ARRAY, T.UINT8


def ugm() -> Fields:
    """t5 (UGM) with a well-formed charsmap that maps nothing."""
    pieces = ["▁"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["▁the", "▁hello"]
    tokens = [b"<pad>", b"</s>", b"<unk>"] + [p.encode() for p in pieces]
    return {
        "tokenizer.ggml.model": text("t5"),
        "tokenizer.ggml.tokens": strings(tokens),
        "tokenizer.ggml.scores": floats([0.0] * 3 + [-1.0 - i for i in range(len(pieces))]),
        "tokenizer.ggml.token_type": ints([CONTROL, CONTROL, UNKNOWN] + [NORMAL] * len(pieces)),
        "tokenizer.ggml.eos_token_id": u32(1),
        "tokenizer.ggml.unknown_token_id": u32(2),
        "tokenizer.ggml.precompiled_charsmap": charsmap({}),
    }


def rwkv_escaped(data: bytes) -> bytes:
    return b"".join(b"\\\\" if b == 0x5C else bytes([b]) if 0x20 <= b < 0x7F else b"\\x%02x" % b for b in data)


def rwkv() -> Fields:
    """rwkv: every byte as an escaped token, then two words."""
    tokens = [rwkv_escaped(bytes([b])) for b in range(256)] + [b"the", b" the"]
    return {
        "tokenizer.ggml.model": text("rwkv"),
        "tokenizer.ggml.tokens": strings(tokens),
        "tokenizer.ggml.token_type": ints([NORMAL] * len(tokens)),
    }


VOCABULARIES = {"spm": spm, "bpe": bpe, "wpm": wpm, "ugm": ugm, "rwkv": rwkv}


def with_tokens(fields: Fields, edit) -> Fields:
    """fields with tokenizer.ggml.tokens replaced by edit(a copy of them)."""
    tokens = list(fields["tokenizer.ggml.tokens"][0])
    edit(tokens)
    return {**fields, "tokenizer.ggml.tokens": strings(tokens)}


def normal_token(fields: Fields, index: int, text: bytes) -> Fields:
    """fields with token `index` renamed to `text` and made a normal token."""
    types = list(fields["tokenizer.ggml.token_type"][0])
    types[index] = NORMAL
    renamed = with_tokens(fields, lambda t: t.__setitem__(index, text))
    return {**renamed, "tokenizer.ggml.token_type": ints(types)}


def without(fields: Fields, *keys: str) -> Fields:
    return {k: v for k, v in fields.items() if k not in keys}


def assert_refused(path: Path, message: str) -> None:
    """The Tokenizer (llama.cpp's vocabulary-only load) and RiverModel both refuse the file."""
    with pytest.raises(RiverError, match=message) as e:
        Tokenizer(str(path))
    assert str(path) in str(e.value)
    with pytest.raises(RiverError, match=message):
        RiverModel(path)


# Loads the file with llama.cpp unchecked and uses it as river-cpp does; exits 0
# when llama.cpp refuses or survives it.
UNCHECKED_USE = textwrap.dedent(
    """
    import ctypes, resource, sys
    import llama_cpp
    from river_cpp.engine._ggml import set_ggml_verbosity
    from river_cpp.engine.compute.tokenizer import Tokenizer
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    set_ggml_verbosity(False)
    t = Tokenizer.__new__(Tokenizer)
    try:
        t._load(sys.argv[1])
    except ValueError:
        sys.exit(0)
    buf = ctypes.create_string_buffer(256)
    for s in ["Hello world", "A a\\n", "naïve 日本"]:
        for token in t.tokenize(s, add_bos=True):
            llama_cpp.llama_token_to_piece(t._vocab, token, buf, 256, 0, False)
    for token in range(max(int(sys.argv[2]), t.n_vocab)):
        llama_cpp.llama_token_to_piece(t._vocab, token, buf, 256, 0, False)
    """
)


def assert_unchecked_llama_cpp_dies(path: Path, n_rows: int) -> None:
    """The class is real: unchecked, llama.cpp kills the process (or never returns)."""
    try:
        run = subprocess.run(
            [sys.executable, "-c", UNCHECKED_USE, str(path), str(n_rows)],
            capture_output=True,
            timeout=60,
            env={**os.environ, "GGML_NO_BACKTRACE": "1"},  # ggml's abort would attach gdb
        )
    except subprocess.TimeoutExpired:
        return
    assert run.returncode < 0, (
        f"llama.cpp survived {path.name} (exit {run.returncode}): this version may no longer need the check\n"
        + run.stderr.decode(errors="replace")[-2000:]
    )


# ---------------------------------------------------------------- valid vocabularies


@pytest.mark.parametrize("kind", sorted(VOCABULARIES))
def test_valid_vocabularies_load_and_tokenize(tmp_path, kind):
    path = write_model(tmp_path / f"{kind}.gguf", VOCABULARIES[kind]())
    check_vocabulary(str(path))
    tokenizer = Tokenizer(str(path))
    try:
        ids = tokenizer.tokenize("hello the world\nA", add_bos=True)
        assert ids and all(0 <= i < tokenizer.n_vocab for i in ids)
        tokenizer.detokenize_bytes(range(tokenizer.n_vocab))
    finally:
        tokenizer.close()


def test_demo_vocabulary_passes(demo_model):
    check_vocabulary(str(demo_model))


# ---------------------------------------------------------------- classes that kill llama.cpp

# (vocabulary, its lie, the message): each crashed the process before the checks.
CRASHES = {
    # GGML_ASSERT(id_to_token.size() == token_to_id.size()) at load
    "duplicate token": (spm, lambda f: with_tokens(f, lambda t: t.__setitem__(270, t[271])), "are both"),
    "duplicate after a NUL": (spm, lambda f: with_tokens(f, lambda t: t.__setitem__(270, t[271] + b"\0x")), "are both"),
    "empty token renamed onto another": (
        bpe,
        lambda f: with_tokens(f, lambda t: t.__setitem__(5, b"") or t.__setitem__(6, b"[EMPTY_5]")),
        "are both",
    ),
    # GGML_ABORT in token_to_byte at load
    "byte token in a WPM vocabulary": (
        wpm,
        lambda f: {**f, "tokenizer.ggml.token_type": ints([CONTROL, UNKNOWN, CONTROL, CONTROL, BYTE] + [NORMAL] * 51)},
        "byte token, which a bert",
    ),
    # GGML_ASSERT(special_bos_id != LLAMA_TOKEN_NULL) on tokenize
    "BOS added but absent": (
        bpe,
        lambda f: {**without(f, "tokenizer.ggml.bos_token_id"), "tokenizer.ggml.add_bos_token": flag(True)},
        "adds a BOS token",
    ),
    # GGML_ASSERT(special_eos_id != LLAMA_TOKEN_NULL) on tokenize
    "EOS added but absent": (
        bpe,
        lambda f: {**without(f, "tokenizer.ggml.eos_token_id"), "tokenizer.ggml.add_eos_token": flag(True)},
        "adds an EOS token",
    ),
    # GGML_ASSERT(special_sep_id != LLAMA_TOKEN_NULL) on tokenize
    "WPM without a separator": (wpm, lambda f: without(f, "tokenizer.ggml.seperator_token_id"), "separator"),
    # -1 among the ids, then std::out_of_range out of llama_token_to_piece
    "WPM without an unknown token": (wpm, lambda f: without(f, "tokenizer.ggml.unknown_token_id"), "unknown token"),
    # std::out_of_range out of llama_tokenize (byte fallback)
    "SPM byte without a token": (spm, lambda f: normal_token(f, 3 + 0x41, b"gone"), "no token for byte <0x41>"),
    # endless loop growing the output, then std::bad_alloc
    "RWKV byte without a token": (
        rwkv,
        lambda f: with_tokens(f, lambda t: t.__setitem__(ord("A"), b"AA")),
        "no single-byte token for byte 65",
    ),
    # "Index out of array bounds in XCDA array!" out of llama_tokenize
    # (after an "a": the load's own tokenization of "\n" must get through)
    "UGM charsmap walk leaves the array": (
        ugm,
        lambda f: {**f, "tokenizer.ggml.precompiled_charsmap": charsmap({0x61: ((0x61 ^ 0x100) << 10) | 0x61})},
        "leads to node",
    ),
    # "Index out of array bounds in precompiled charsmap!" out of llama_tokenize
    "UGM charsmap replacement outside the blob": (
        ugm,
        lambda f: {
            **f,
            "tokenizer.ggml.precompiled_charsmap": charsmap({0x61: (0x71 << 10) | (1 << 8) | 0x61, 0x10: 5}),
        },
        "NUL-terminated string inside the blob",
    ),
    # GGML_ASSERT(tokenizer && ...) on tokenize: a vocabulary of no type
    "no vocabulary type": (spm, lambda f: {**f, "tokenizer.ggml.model": text("none")}, "is not supported"),
}


@pytest.mark.parametrize("case", sorted(CRASHES))
def test_crashing_vocabularies_are_refused(tmp_path, case):
    make, lie, message = CRASHES[case]
    path = write_model(tmp_path / "lie.gguf", lie(make()))
    assert_refused(path, message)
    assert_unchecked_llama_cpp_dies(path, len(lie(make())["tokenizer.ggml.tokens"][0]))


def test_model_rows_beyond_the_vocabulary(tmp_path):
    """An embedding with more rows than tokens: a sampled id beyond the vocabulary
    throws out of llama_token_to_piece."""
    fields = spm()
    n_tokens = len(fields["tokenizer.ggml.tokens"][0])
    path = write_model(tmp_path / "rows.gguf", fields, n_rows=n_tokens + 3)
    with pytest.raises(RiverError, match=f"{n_tokens + 3} rows but the vocabulary has {n_tokens} tokens"):
        RiverModel(path)
    assert_unchecked_llama_cpp_dies(path, n_tokens + 3)


def test_piece_of_an_id_outside_the_vocabulary(tmp_path):
    tokenizer = Tokenizer(str(write_model(tmp_path / "spm.gguf", spm())))
    try:
        with pytest.raises(ValueError, match="outside the vocabulary"):
            tokenizer.detokenize([tokenizer.n_vocab])
        with pytest.raises(ValueError, match="outside the vocabulary"):
            tokenizer.detokenize([-1])
    finally:
        tokenizer.close()


# ---------------------------------------------------------------- consistency


CONSISTENCY = {
    "scores shorter than tokens": (spm, lambda f: {**f, "tokenizer.ggml.scores": floats([0.0] * 10)}, "scores has 10"),
    "types longer than tokens": (bpe, lambda f: {**f, "tokenizer.ggml.token_type": ints([1] * 11)}, "has 11 entries"),
    "scores of another type": (
        spm,
        lambda f: {**f, "tokenizer.ggml.scores": ([0] * 293, T.ARRAY, T.UINT8)},
        "float32 or int32",
    ),
    "NaN score": (spm, lambda f: {**f, "tokenizer.ggml.scores": floats([float("nan")] * 293)}, "is NaN"),
    "unknown token type": (bpe, lambda f: {**f, "tokenizer.ggml.token_type": ints([1] * 9 + [7])}, "has type 7"),
    "byte token not spelled <0xXX>": (
        spm,
        lambda f: with_tokens(f, lambda t: t.__setitem__(3, b"<0x0>")),
        "not <0xXX>",
    ),
    "special id outside the vocabulary": (spm, lambda f: {**f, "tokenizer.ggml.eot_token_id": u32(293)}, "outside"),
    "special id of another type": (
        spm,
        lambda f: {**f, "tokenizer.ggml.bos_token_id": (1, T.INT32, None)},
        "must be a uint32",
    ),
    "merge of a missing token": (
        bpe,
        lambda f: {**f, "tokenizer.ggml.merges": strings([b"h e", b"x y"])},
        "names 'x', which is not a token",
    ),
    "merge without a space": (bpe, lambda f: {**f, "tokenizer.ggml.merges": strings([b"he"])}, "two tokens"),
    "no merges": (bpe, lambda f: without(f, "tokenizer.ggml.merges"), "merges is missing"),
    "tokens not strings": (bpe, lambda f: {**f, "tokenizer.ggml.tokens": ints([1] * 10)}, "array of strings"),
    "chat template not a string": (bpe, lambda f: {**f, "tokenizer.chat_template": u32(1)}, "chat_template"),
    "add_bos_token not a bool": (bpe, lambda f: {**f, "tokenizer.ggml.add_bos_token": u32(1)}, "must be a bool"),
    "unsupported tokenizer model": (bpe, lambda f: {**f, "tokenizer.ggml.model": text("plamo2")}, "plamo2"),
}


@pytest.mark.parametrize("case", sorted(CONSISTENCY))
def test_inconsistent_vocabularies_are_refused(tmp_path, case):
    make, lie, message = CONSISTENCY[case]
    fields = lie(make())
    n_rows = len(make()["tokenizer.ggml.tokens"][0])
    assert_refused(write_model(tmp_path / "lie.gguf", fields, n_rows=n_rows), message)


def test_a_file_without_a_tokenizer(tmp_path):
    """The engine runs a model without one (it never tokenizes); the Tokenizer refuses it."""
    fields = spm()
    path = write_model(tmp_path / "bare.gguf", {"tokenizer.ggml.tokens": fields["tokenizer.ggml.tokens"]})
    with pytest.raises(RiverError, match="no tokenizer"):
        Tokenizer(str(path))


def test_a_changed_file_is_checked_again(tmp_path):
    """Passes are remembered by file identity (the engine and the tokenizer check the
    same file in turn); a file rewritten since is checked anew."""
    path = tmp_path / "model.gguf"
    write_model(path, spm())
    Tokenizer(str(path)).close()
    write_model(path, with_tokens(spm(), lambda t: t.__setitem__(270, t[271])))
    with pytest.raises(RiverError, match="are both"):
        Tokenizer(str(path))
