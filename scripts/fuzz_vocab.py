"""Structure-aware fuzzing of GGUF vocabularies (scripts/fuzz_gguf.py's `vocab` target).

    nice -n 19 python scripts/fuzz_gguf.py vocab -max_total_time=1200

Each execution takes one valid tiny model (the demo model's BPE tokenizer, or a
small llama (SPM), bert (WPM), t5 (UGM) or rwkv vocabulary written here), makes one
to four of its tokenizer fields lie (token texts, scores, token types, merges,
special ids, add_* flags, tokenizer model and pre-tokenizer, the charsmap, the chat
template), writes it and hands it to a forked child. The child records the verdict
of river-cpp's checks (the Tokenizer's and the Engine's), then loads the file with
llama.cpp unchecked and uses it the way river-cpp does: tokenize texts, turn every
id the model can produce into its piece, ask for EOG, render the chat template. A
child that dies by a signal or hangs is a crash; one whose file the checks let
through is a finding (its file is kept). Crashes of rejected files show what the
checks prevent. No atheris: without native coverage a seeded generator is as good.
"""

from __future__ import annotations

import json
import os
import random
import re
import resource
import signal
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' tiny llama
from gguf_files import tiny_llama_hparams, tiny_llama_shapes  # noqa: E402

STRING, ARRAY = 8, 9
UINT8, INT8, UINT32, INT32, FLOAT32, BOOL, UINT64 = 0, 1, 4, 5, 6, 7, 10
SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
CHILD_TIMEOUT_S = 60
# a tokenizer that loops while growing its output must not take the shared machine down
CHILD_MEMORY_BYTES = 6 << 30
SPECIAL_KEYS = [
    f"tokenizer.ggml.{name}_token_id"
    for name in (
        "bos eos unknown seperator padding mask eot eom fim_pre fim_suf fim_mid fim_pad fim_rep fim_sep "
        "prefix suffix middle cls"
    ).split()
]
TEXTS = [
    "Hello world",
    " leading space and  two",
    "\n\n\tindent\r\n",
    "naïve café 日本語 🙂 Ωμέγα",
    "\x00\x01\x7f nul and controls",
    "<|im_start|>user\nhi<|im_end|><s></s>[CLS][SEP]<unk>",
    "def f(x):\n    return x * 2  # 1234567890",
    "",
]


# ---------------------------------------------------------------- GGUF bytes


@dataclass
class Kv:
    key: str
    type: int
    value: Any  # scalar, bytes (strings), or list for arrays
    elem: int = 0  # element type of an array


def _pack_scalar(kind: int, value: Any) -> bytes:
    if kind == STRING:
        return struct.pack("<Q", len(value)) + value
    return struct.pack("<" + SCALAR_FORMATS[kind], value)


def pack_kv(kv: Kv) -> bytes:
    key = kv.key.encode()
    out = [struct.pack("<Q", len(key)), key, struct.pack("<I", kv.type)]
    if kv.type == ARRAY:
        out.append(struct.pack("<IQ", kv.elem, len(kv.value)))
        if kv.elem == STRING:
            out.extend(struct.pack("<Q", len(s)) + s for s in kv.value)
        else:
            out.append(struct.pack(f"<{len(kv.value)}{SCALAR_FORMATS[kv.elem]}", *kv.value))
    else:
        out.append(_pack_scalar(kv.type, kv.value))
    return b"".join(out)


@dataclass
class Model:
    """A GGUF as editable metadata and verbatim tensors."""

    kvs: list[Kv]
    n_tensors: int
    tensor_infos: bytes
    data: bytes
    n_rows: int  # rows of token_embd: the ids the engine can produce

    def find(self, key: str) -> Kv | None:
        return next((kv for kv in self.kvs if kv.key == key), None)

    def set(self, kv: Kv) -> None:
        self.kvs = [k for k in self.kvs if k.key != kv.key] + [kv]

    def remove(self, key: str) -> None:
        self.kvs = [k for k in self.kvs if k.key != key]

    def to_bytes(self) -> bytes:
        head = [b"GGUF", struct.pack("<IQQ", 3, self.n_tensors, len(self.kvs))]
        head.extend(pack_kv(kv) for kv in self.kvs)
        head.append(self.tensor_infos)
        size = sum(len(part) for part in head)
        head.append(b"\0" * ((32 - size % 32) % 32))
        head.append(self.data)
        return b"".join(head)

    def copy(self) -> Model:
        kvs = [Kv(k.key, k.type, list(k.value) if isinstance(k.value, list) else k.value, k.elem) for k in self.kvs]
        return Model(kvs, self.n_tensors, self.tensor_infos, self.data, self.n_rows)


def tiny_llama_tensors(n_vocab: int, rng: np.random.Generator) -> tuple[list[Kv], int, bytes, bytes]:
    """Hyperparameters, tensor infos and data of the tests' tiny llama (one layer, F32)
    with n_vocab embedding rows."""
    kvs = [Kv("general.architecture", STRING, b"llama")]
    for key, value in tiny_llama_hparams(1).items():
        kvs.append(Kv(f"llama.{key}", UINT32 if isinstance(value, int) else FLOAT32, value))
    shapes = tiny_llama_shapes(n_vocab, 1)
    infos, data = [], []
    offset = 0
    for name, shape in shapes.items():
        values = rng.normal(0, 0.3, shape).astype(np.float32).tobytes()
        dims = list(reversed(shape))  # ggml order
        infos.append(struct.pack("<Q", len(name)) + name.encode() + struct.pack("<I", len(dims)))
        infos.append(struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", 0, offset))
        data.append(values + b"\0" * ((32 - len(values) % 32) % 32))
        offset += len(data[-1])
    return kvs, len(shapes), b"".join(infos), b"".join(data)


def model_with_vocab(vocab: list[Kv], n_vocab: int, seed: int) -> Model:
    kvs, n_tensors, infos, data = tiny_llama_tensors(n_vocab, np.random.default_rng(seed))
    return Model(kvs + vocab, n_tensors, infos, data, n_vocab)


# ---------------------------------------------------------------- seed vocabularies


def _strings(key: str, values: list[bytes]) -> Kv:
    return Kv(key, ARRAY, values, STRING)


def demo_vocab() -> list[Kv]:
    """Every tokenizer.* field of the demo model (SmolLM2's BPE, 49152 tokens)."""
    import gguf

    from river_cpp.apps.demo import demo_model_path

    reader = gguf.GGUFReader(demo_model_path())
    out = []
    for key, f in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        kind = int(f.types[0])
        if kind == ARRAY:
            elem = int(f.types[-1])
            if elem == STRING:
                value = [bytes(f.parts[i]) for i in f.data]
            else:
                value = [x.item() for i in f.data for x in f.parts[i]]
            out.append(Kv(key, ARRAY, value, elem))
        elif kind == STRING:
            out.append(Kv(key, STRING, bytes(f.parts[f.data[0]])))
        else:
            out.append(Kv(key, kind, f.parts[f.data[0]][0].item()))
    return out


def _byte_tokens() -> list[bytes]:
    return [f"<0x{b:02X}>".encode() for b in range(256)]


def spm_vocab() -> list[Kv]:
    """A llama (SPM) vocabulary: specials, 256 byte tokens, letters and a few pieces."""
    words = ["▁", "▁t", "▁a", "he", "▁the", "in", "er", "▁w", "or", "▁wor", "ld", "▁world", "▁He", "llo"]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("HW")
    tokens = [b"<unk>", b"<s>", b"</s>"] + _byte_tokens() + [w.encode() for w in letters + words]
    types = [2, 3, 3] + [6] * 256 + [1] * (len(letters) + len(words))
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [-float(i) for i in range(len(letters) + len(words))]
    return [
        Kv("tokenizer.ggml.model", STRING, b"llama"),
        _strings("tokenizer.ggml.tokens", tokens),
        Kv("tokenizer.ggml.scores", ARRAY, scores, FLOAT32),
        Kv("tokenizer.ggml.token_type", ARRAY, types, INT32),
        Kv("tokenizer.ggml.bos_token_id", UINT32, 1),
        Kv("tokenizer.ggml.eos_token_id", UINT32, 2),
        Kv("tokenizer.ggml.unknown_token_id", UINT32, 0),
        Kv("tokenizer.chat_template", STRING, b"{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}"),
    ]


def wpm_vocab() -> list[Kv]:
    """A bert (WPM) vocabulary."""
    pieces = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["▁" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces += ["▁hello", "▁world", "ing", ".", ",", "!"]
    tokens = [b"[PAD]", b"[UNK]", b"[CLS]", b"[SEP]", b"[MASK]"] + [p.encode() for p in pieces]
    return [
        Kv("tokenizer.ggml.model", STRING, b"bert"),
        _strings("tokenizer.ggml.tokens", tokens),
        Kv("tokenizer.ggml.token_type", ARRAY, [3, 2, 3, 3, 3] + [1] * len(pieces), INT32),
        Kv("tokenizer.ggml.padding_token_id", UINT32, 0),
        Kv("tokenizer.ggml.unknown_token_id", UINT32, 1),
        Kv("tokenizer.ggml.bos_token_id", UINT32, 2),
        Kv("tokenizer.ggml.seperator_token_id", UINT32, 3),
        Kv("tokenizer.ggml.mask_token_id", UINT32, 4),
    ]


def ugm_vocab() -> list[Kv]:
    """A t5 (UGM) vocabulary with an empty but well-formed precompiled_charsmap."""
    pieces = ["▁"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["▁the", "▁a", "▁hello", "▁world", "er"]
    tokens = [b"<pad>", b"</s>", b"<unk>"] + [p.encode() for p in pieces]
    # 256 zero nodes: the root's children never match; one NUL replacement string
    charsmap = list(struct.pack("<I", 1024)) + [0] * 1024 + [0]
    return [
        Kv("tokenizer.ggml.model", STRING, b"t5"),
        _strings("tokenizer.ggml.tokens", tokens),
        Kv("tokenizer.ggml.scores", ARRAY, [0.0, 0.0, 0.0] + [-1.0 - i for i in range(len(pieces))], FLOAT32),
        Kv("tokenizer.ggml.token_type", ARRAY, [3, 3, 2] + [1] * len(pieces), INT32),
        Kv("tokenizer.ggml.eos_token_id", UINT32, 1),
        Kv("tokenizer.ggml.unknown_token_id", UINT32, 2),
        Kv("tokenizer.ggml.padding_token_id", UINT32, 0),
        Kv("tokenizer.ggml.precompiled_charsmap", ARRAY, charsmap, UINT8),
    ]


def rwkv_escape(data: bytes) -> bytes:
    out = b""
    for b in data:
        out += b"\\\\" if b == 0x5C else bytes([b]) if 0x20 <= b < 0x7F else f"\\x{b:02x}".encode()
    return out


def rwkv_vocab() -> list[Kv]:
    """An rwkv vocabulary: every byte, escaped, then a few words."""
    tokens = [rwkv_escape(bytes([b])) for b in range(256)] + [rwkv_escape(w) for w in (b"the", b" the", b"\n\n")]
    return [
        Kv("tokenizer.ggml.model", STRING, b"rwkv"),
        _strings("tokenizer.ggml.tokens", tokens),
        Kv("tokenizer.ggml.token_type", ARRAY, [1] * len(tokens), INT32),
    ]


# ---------------------------------------------------------------- mutations


class Mutator:
    """One to four lies about a seed's vocabulary, drawn from rng."""

    MODELS = [b"llama", b"gpt2", b"bert", b"t5", b"rwkv", b"none", b"no_vocab", b"plamo2", b"gemma4"]
    MODELS += [b"whitespace", b"hybriddna", b"test", b"llama\0x", b"???"]
    PRES = [b"default", b"llama3", b"qwen2", b"smollm", b"gemma4", b"tekken", b"kimi-k2", b"gpt-4o", b"nope"]
    TEMPLATES = [b"chatml", b"llama3", b"gemma", b"<|im_start|>{{x}}", b"\xff\xfe", b"a\0b", b"", b"x" * 100_000]

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def __call__(self, model: Model) -> list[str]:
        ops = [name for name in dir(self) if name.startswith("m_")]
        done = []
        for _ in range(self.rng.randint(1, 4)):
            name = self.rng.choice(ops)
            getattr(self, name)(model)
            done.append(name[2:])
        return done

    def _tokens(self, model: Model) -> list[bytes]:
        kv = model.find("tokenizer.ggml.tokens")
        return kv.value if kv and kv.type == ARRAY and kv.elem == STRING else []

    def _id(self, n: int) -> int:
        r = self.rng
        return r.choice([0, 1, 2, 3, 11, 100, 101, 102, n - 1, n, n + 1, n + 100, 2**31 - 1, 2**31, 2**32 - 1])

    def m_token_text(self, model: Model) -> None:
        tokens = self._tokens(model)
        if not tokens:
            return
        r, i = self.rng, self.rng.randrange(len(tokens))
        kind = r.randrange(7)
        if kind == 0:  # a duplicate
            tokens[i] = tokens[r.randrange(len(tokens))]
        elif kind == 1:  # empty, or one that reads as another after a NUL
            tokens[i] = b"" if r.random() < 0.5 else tokens[r.randrange(len(tokens))] + b"\0" + b"x"
        elif kind == 2:  # a byte token or single byte removed
            victims = [j for j, t in enumerate(tokens) if len(t) == 1 or t.startswith(b"<0x") or t.startswith(b"\\x")]
            if victims:
                tokens[r.choice(victims)] = b"gone%d" % r.randrange(10**9)
        elif kind == 3:
            tokens[i] = bytes(r.randrange(256) for _ in range(r.randrange(1, 12)))
        elif kind == 4:  # drop tokens from the end
            del tokens[len(tokens) - r.randint(1, min(len(tokens), 300)) :]
        elif kind == 5:
            tokens.extend(b"extra%d" % j for j in range(r.randint(1, 40)))
        else:
            tokens[i] = r.choice([b"[EMPTY_%d]" % r.randrange(len(tokens)), b"<|im_end|>", b"</s>", b"\\", b"\\x"])

    def m_scores(self, model: Model) -> None:
        n, r = len(self._tokens(model)), self.rng
        kv = model.find("tokenizer.ggml.scores") or Kv("tokenizer.ggml.scores", ARRAY, [0.0] * n, FLOAT32)
        kind = r.randrange(5)
        if kind == 0 and kv.value and kv.elem == FLOAT32:
            kv.value[r.randrange(len(kv.value))] = r.choice([float("nan"), float("inf"), -float("inf"), 1e38])
        elif kind == 1:
            kv.value = kv.value[: r.randrange(len(kv.value) + 1)]
        elif kind == 2:
            kv.elem = r.choice([INT32, UINT8, UINT32, STRING])
            kv.value = [b"s"] * len(kv.value) if kv.elem == STRING else [r.randrange(100) for _ in kv.value]
        elif kind == 3:
            model.remove(kv.key)
            return
        else:
            kv.elem, kv.value = FLOAT32, [r.uniform(-50, 50) for _ in range(n)]
        model.set(kv)

    def m_token_types(self, model: Model) -> None:
        n, r = len(self._tokens(model)), self.rng
        kv = model.find("tokenizer.ggml.token_type") or Kv("tokenizer.ggml.token_type", ARRAY, [1] * n, INT32)
        kind = r.randrange(6)
        if kind <= 1 and kv.value and kv.elem == INT32:
            for _ in range(r.randint(1, 20)):
                kv.value[r.randrange(len(kv.value))] = r.choice([-1, 0, 2, 3, 4, 5, 6, 6, 6, 7, 100, 2**31 - 1])
        elif kind == 2:
            kv.value = kv.value[: r.randrange(len(kv.value) + 1)] + [1] * r.randrange(3)
        elif kind == 3:
            kv.elem = r.choice([UINT32, UINT8, FLOAT32])
            kv.value = [float(v) if kv.elem == FLOAT32 else v % (256 if kv.elem == UINT8 else 2**32) for v in kv.value]
        elif kind == 4:
            model.remove(kv.key)
            return
        else:
            kv.elem, kv.value = INT32, [r.choice([1, 2, 3, 4, 5, 6]) for _ in range(n)]
        model.set(kv)

    def m_merges(self, model: Model) -> None:
        tokens, r = self._tokens(model), self.rng
        kv = model.find("tokenizer.ggml.merges") or Kv("tokenizer.ggml.merges", ARRAY, [], STRING)
        kind = r.randrange(6)
        if kv.elem != STRING:
            kv.elem, kv.value = STRING, []
        if kind == 0 and kv.value:
            kv.value[r.randrange(len(kv.value))] = r.choice([b"nospace", b"a ", b" a", b"", b"a b c", b"\0 x"])
        elif kind == 1 and tokens:
            kv.value.insert(r.randrange(len(kv.value) + 1), r.choice(tokens) + b" " + r.choice(tokens))
        elif kind == 2:
            kv.value = kv.value[: r.randrange(len(kv.value) + 1)]
        elif kind == 3:
            model.remove(kv.key)
            return
        elif kind == 4:
            kv.elem, kv.value = INT32, [1, 2, 3]
        else:
            kv.value = kv.value + kv.value[: r.randrange(100)]
        model.set(kv)

    def m_special_id(self, model: Model) -> None:
        n, r = len(self._tokens(model)), self.rng
        key = r.choice(SPECIAL_KEYS)
        kind = r.randrange(5)
        if kind == 0:
            model.remove(key)
        elif kind == 1:
            model.set(Kv(key, r.choice([INT32, UINT64, UINT8]), r.randrange(3)))
        else:
            model.set(Kv(key, UINT32, self._id(n)))

    def m_add_flags(self, model: Model) -> None:
        r = self.rng
        key = "tokenizer.ggml." + r.choice(["add_bos_token", "add_eos_token", "add_sep_token", "add_space_prefix"])
        if r.random() < 0.2:
            model.set(Kv(key, UINT32, 1))
        elif r.random() < 0.2:
            model.remove(key)
        else:
            model.set(Kv(key, BOOL, r.random() < 0.7))

    def m_model(self, model: Model) -> None:
        model.set(Kv("tokenizer.ggml.model", STRING, self.rng.choice(self.MODELS)))

    def m_pre(self, model: Model) -> None:
        if self.rng.random() < 0.2:
            model.remove("tokenizer.ggml.pre")
        else:
            model.set(Kv("tokenizer.ggml.pre", STRING, self.rng.choice(self.PRES)))

    def m_charsmap(self, model: Model) -> None:
        r = self.rng
        kv = model.find("tokenizer.ggml.precompiled_charsmap")
        kv = kv or Kv("tokenizer.ggml.precompiled_charsmap", ARRAY, list(struct.pack("<I", 1024)) + [0] * 1025, UINT8)
        data = kv.value
        for _ in range(r.randint(1, 16)):
            at = r.randrange(len(data)) if r.random() < 0.8 else r.randrange(min(len(data), 4 + 1024))
            data[at] = r.randrange(256)
        if r.random() < 0.2:  # the array's declared size
            data[0:4] = list(struct.pack("<I", r.choice([0, 3, 4, 1020, 1024, 1025, len(data), 2**32 - 1])))
        if r.random() < 0.1:
            del data[r.randrange(len(data)) :]
        if r.random() < 0.05:
            kv.elem, kv.value = FLOAT32, [0.0] * 8
        model.set(kv)

    def m_chat_template(self, model: Model) -> None:
        r = self.rng
        if r.random() < 0.15:
            model.set(Kv("tokenizer.chat_template", r.choice([UINT32, BOOL]), 1))
        elif r.random() < 0.1:
            model.set(Kv("tokenizer.chat_template", ARRAY, [b"chatml"], STRING))
        else:
            model.set(Kv("tokenizer.chat_template", STRING, r.choice(self.TEMPLATES)))

    def m_name(self, model: Model) -> None:
        # llama.cpp sets token attributes by model name (phi-3, modern-bert, jina)
        model.set(Kv("general.name", STRING, self.rng.choice([b"phi-3-mini", b"modern-bert", b"x"])))


# ---------------------------------------------------------------- the child


def child(path: str, n_rows: int, verdict_fd: int, text_seed: int) -> None:
    """Record river-cpp's verdict, then use the file with llama.cpp unchecked. Exits 0
    when the file is refused or used, 1 for an unexpected Python exception."""
    import ctypes

    import llama_cpp

    from river_cpp.engine import _core
    from river_cpp.engine.compute.tokenizer import Tokenizer

    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY_BYTES, CHILD_MEMORY_BYTES))
    os.environ["GGML_NO_BACKTRACE"] = "1"  # ggml's abort would attach gdb for seconds
    signal.alarm(CHILD_TIMEOUT_S)
    verdict = "accepted"
    try:
        _core.check_vocabulary(path)
        _core.Engine(path, 16, 16, 1)
    except _core.RiverError as e:
        verdict = "refused: " + str(e).replace(path, "<file>").split("<file>: ", 1)[-1][:300]
    os.write(verdict_fd, verdict.encode())
    os.close(verdict_fd)

    tokenizer = Tokenizer.__new__(Tokenizer)
    try:
        tokenizer._load(path)
    except ValueError:
        os._exit(0)  # llama.cpp refused it: no crash
    rng = random.Random(text_seed)
    texts = TEXTS + ["".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(1, 0x3000)])) for _ in range(40))]
    for text in texts:
        for add_bos in (True, False):
            for special in (True, False):
                tokenizer.tokenize(text, add_bos=add_bos, special=special)
    # every id the model can sample, piece by piece as generation does (raw: the
    # Python range check would hide the crash this is after)
    buf = ctypes.create_string_buffer(256)
    for token in range(max(n_rows, tokenizer.n_vocab)):
        llama_cpp.llama_token_to_piece(tokenizer._vocab, token, buf, len(buf), 0, False)
        tokenizer.is_end_of_generation(token)
    tokenizer.detokenize(tokenizer.tokenize(texts[3]))
    _ = tokenizer.eos_id
    try:
        _ = tokenizer.chat_template
        tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    except ValueError:
        pass  # no template, or one llama.cpp does not know
    tokenizer.close()
    os._exit(0)


# ---------------------------------------------------------------- the loop


@dataclass
class Stats:
    executions: int = 0
    accepted: int = 0
    crashes_refused: dict[str, int] = field(default_factory=dict)  # crashes the checks prevent
    findings: dict[str, int] = field(default_factory=dict)  # crashes of accepted files (and of the checks)
    python_errors: dict[str, int] = field(default_factory=dict)
    refusals: dict[str, int] = field(default_factory=dict)
    classes: dict[str, int] = field(default_factory=dict)  # crash signature -> number in file names


def crash_signature(status: int, stderr: bytes) -> str:
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM:
        return f"hang (no answer in {CHILD_TIMEOUT_S} s)"
    lines = [ln for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    key = ""
    for marks in (("GGML_ASSERT", "GGML_ABORT", "fatal error"), ("what()",), ("terminate",)):
        key = key or next((ln for ln in reversed(lines) if any(m in ln for m in marks)), "")
    key = key or (lines[-1] if lines else "")
    where = key.split("/")[-1][:160]
    if "what()" in where:  # one class whatever the sizes and ids it names
        where = re.sub(r"\d+", "N", where)
    name = signal.Signals(os.WTERMSIG(status)).name if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
    return f"{name}: {where}"


def run_one(data: bytes, n_rows: int, work: Path, ops: list[str], stats: Stats, text_seed: int) -> None:
    """Write the file, run a child on it, and file its outcome in stats."""
    path = work / "input.gguf"
    path.write_bytes(data)
    err = work / "stderr"
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        fd = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 2)
        try:
            child(str(path), n_rows, write_fd, text_seed)
        except BaseException as e:  # noqa: BLE001 (reported to the parent through stderr)
            print(f"PYTHON {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        os._exit(1)
    os.close(write_fd)
    verdict = b""
    while chunk := os.read(read_fd, 4096):
        verdict += chunk
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    verdict_text = verdict.decode("utf-8", "replace") or "no verdict: died in river-cpp's checks"
    stats.executions += 1
    # a child that died before its verdict died in river-cpp's own code: a finding
    accepted = verdict_text == "accepted" or not verdict
    if accepted:
        stats.accepted += 1
    else:
        kind = re.sub(r"\d+", "N", re.sub(r"'[^']*'", "'...'", verdict_text))[:90]
        stats.refusals[kind] = stats.refusals.get(kind, 0) + 1
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return
    stderr = err.read_bytes()[-4000:]
    if os.WIFEXITED(status) and b"PYTHON " in stderr:
        line = stderr[stderr.rindex(b"PYTHON ") :].decode("utf-8", "replace").splitlines()[0][:160]
        line = ("accepted file: " if accepted else "refused file: ") + line
        stats.python_errors[line] = stats.python_errors.get(line, 0) + 1
        return
    sig = crash_signature(status, stderr)
    table = stats.findings if accepted else stats.crashes_refused
    table[sig] = table.get(sig, 0) + 1
    if table[sig] <= 3:  # keep a few inputs of each class
        tag = "finding" if accepted else "refused"
        number = stats.classes.setdefault(sig, len(stats.classes) + 1)
        saved = work / f"{tag}-{number}-{table[sig]}.gguf"
        saved.write_bytes(path.read_bytes())
        (work / f"{saved.stem}.txt").write_text(f"{sig}\nmutations: {ops}\nverdict: {verdict_text}\n")


def report(stats: Stats, minutes: float, out=sys.stderr) -> None:
    print(
        f"fuzz_gguf vocab: {stats.executions} executions in {minutes:.1f} min, {stats.accepted} accepted by the "
        f"checks; crashes: {sum(stats.crashes_refused.values())} of refused files, "
        f"{sum(stats.findings.values())} of accepted files (findings)",
        file=out,
        flush=True,
    )
    for title, table in (
        ("crashes the checks prevent", stats.crashes_refused),
        ("FINDINGS: crashes of accepted files", stats.findings),
        ("unexpected Python exceptions", stats.python_errors),
        ("refusals", stats.refusals),
    ):
        if table:
            print(f"  {title}:", file=out)
            for kind, n in sorted(table.items(), key=lambda item: -item[1])[:30]:
                print(f"    {n:7d}  {kind}", file=out)


def main(argv: list[str]) -> None:
    seconds = 600.0
    for arg in argv:
        if arg.startswith("-max_total_time="):
            seconds = float(arg.split("=", 1)[1])
    # loaded once here, so that each forked child starts with them
    import llama_cpp  # noqa: F401

    import river_cpp.engine.compute.tokenizer
    from river_cpp.engine import _core
    from river_cpp.engine._ggml import set_ggml_verbosity

    set_ggml_verbosity(False)
    work = Path(tempfile.mkdtemp(prefix="fuzz-vocab-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    seeds = [
        model_with_vocab(spm_vocab(), len(spm_vocab()[1].value), 0),
        model_with_vocab(wpm_vocab(), len(wpm_vocab()[1].value), 1),
        model_with_vocab(ugm_vocab(), len(ugm_vocab()[1].value), 2),
        model_with_vocab(rwkv_vocab(), len(rwkv_vocab()[1].value), 3),
    ]
    try:
        demo = demo_vocab()
        seeds.append(model_with_vocab(demo, len(next(k for k in demo if k.key == "tokenizer.ggml.tokens").value), 4))
    except ImportError as e:
        print(f"fuzz_gguf vocab: no demo model ({e}); small vocabularies only", file=sys.stderr)
    rng = random.Random(int.from_bytes(os.urandom(8), "little"))
    mutate = Mutator(rng)
    stats = Stats()
    print(f"fuzz_gguf vocab: {len(seeds)} seeds, work folder {work}", file=sys.stderr, flush=True)
    # every seed must load and run cleanly: otherwise findings would mean nothing
    for seed in seeds:
        run_one(seed.to_bytes(), seed.n_rows, work, [], stats, 0)
    if stats.accepted != len(seeds) or stats.findings or stats.crashes_refused or stats.python_errors:
        report(stats, 0.0)
        sys.exit("fuzz_gguf vocab: a seed is refused or fails; fix the seeds first")
    # ggml's backends load on the first engine and llama.cpp's on the first model:
    # once here rather than in every child
    warm = work / "warm.gguf"
    warm.write_bytes(seeds[0].to_bytes())
    river_cpp.engine.compute.tokenizer.Tokenizer(str(warm)).close()
    _core.Engine(str(warm), 16, 16, 1)
    start = last = time.monotonic()
    while time.monotonic() - start < seconds:
        # the demo vocabulary is slow to load (49152 tokens): one execution in eight
        seed = seeds[-1] if len(seeds) > 4 and rng.random() < 0.125 else rng.choice(seeds[:4])
        model = seed.copy()
        ops = mutate(model)
        try:
            data = model.to_bytes()
        except (struct.error, TypeError):
            continue  # a value its new type cannot hold: not a file
        run_one(data, model.n_rows, work, ops, stats, rng.randrange(2**32))
        if time.monotonic() - last > 60:
            last = time.monotonic()
            report(stats, (last - start) / 60)
    minutes = (time.monotonic() - start) / 60
    report(stats, minutes)
    summary = {
        "executions": stats.executions,
        "minutes": round(minutes, 1),
        "accepted": stats.accepted,
        "crashes_of_refused_files": stats.crashes_refused,
        "findings": stats.findings,
        "python_errors": stats.python_errors,
        "refusals": stats.refusals,
    }
    (work / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"fuzz_gguf vocab: summary and kept inputs in {work}", file=sys.stderr)
