"""Fuzz the engine's GGUF loading in-process with atheris (run by hand; not part of CI).

    pip install atheris
    nice -n 19 python scripts/fuzz_gguf.py backbone bytes -max_total_time=1200
    nice -n 19 python scripts/fuzz_gguf.py river structure -max_total_time=1200
    nice -n 19 python scripts/fuzz_gguf.py vocab -max_total_time=1200

Targets: `backbone` loads the mutated file as a backbone (river_cpp.engine._core.Engine) and
runs a forward; `river` loads it as the river of a valid tiny backbone and runs a
forward on it. Modes: `bytes` applies one to eight random byte edits to a valid tiny
model (overwrites, bit flips, boundary integers, deletions, duplications, three in
four inside the header, sometimes a cut); `structure` keeps a valid file and makes
one to three header fields lie (counts, lengths, dimensions, types, offsets, values)
with boundary values. libFuzzer's input seeds those choices. Every outcome but
success or RiverError is a finding: Python
exceptions are raised to atheris, crashes and aborts end the process with the input
saved by libFuzzer (crash-*). The seed models have no tokenizer (the engine never
reads one), so a file is a few tens of KB and an execution takes about a millisecond.
Without an instrumented build of _core only Python code is coverage-guided; the
native parser is exercised by mutation alone.

Target `vocab` (scripts/fuzz_vocab.py) mutates the tokenizer fields of valid tiny
models and loads each file with llama.cpp in a forked child, since llama.cpp aborts
the process on some vocabularies; it needs no atheris.
"""

from __future__ import annotations

import os
import random
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' tiny llama
from gguf_files import tiny_llama_hparams, tiny_llama_shapes  # noqa: E402

SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9
BOUNDARY_U64 = [
    0,
    1,
    2,
    3,
    4,
    5,
    31,
    32,
    33,
    63,
    64,
    2**16,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**62,
    2**63 - 1,
    2**63,
    2**64 - 32,
    2**64 - 1,
]
BOUNDARY_U32 = [0, 1, 2, 4, 5, 8, 9, 12, 13, 26, 30, 39, 42, 43, 44, 1000, 2**31, 2**32 - 1]


# Seed matrix types by tensor kind (the rest F32): Q8_0 and F16 both, so that mutated
# type fields and sizes meet both block layouts.
SEED_TYPES = {
    "token_embd": "Q8_0",
    "attn_q": "F16",
    "attn_k": "Q8_0",
    "attn_v": "Q8_0",
    "ffn_gate": "Q8_0",
    "ffn_up": "F16",
    "ffn_down": "Q8_0",
    "output": "Q8_0",
}


def write_seed_backbone(path: Path) -> None:
    """The tests' tiny llama with 2 layers and 32 tokens, Q8_0 and F16 matrices, no tokenizer."""
    import gguf

    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(path, "llama")
    for key, value in tiny_llama_hparams(2).items():
        kind = gguf.GGUFValueType.UINT32 if isinstance(value, int) else gguf.GGUFValueType.FLOAT32
        writer.add_key_value(f"llama.{key}", value, kind)
    for name, shape in tiny_llama_shapes(32, 2, output=True).items():
        kind = name.split(".")[-2]  # blk.0.attn_q.weight -> attn_q
        qtype = gguf.GGMLQuantizationType[SEED_TYPES.get(kind, "F32")]
        values = rng.normal(0, 0.3, shape).astype(np.float32)
        writer.add_tensor(name, gguf.quants.quantize(values, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def header_fields(data: bytes) -> list[tuple[int, int]]:
    """(position, width) of every count, length, type, dimension and offset of the header."""
    fields = [(8, 8), (16, 8)]

    def u32(at: int) -> int:
        return struct.unpack_from("<I", data, at)[0]

    def u64(at: int) -> int:
        return struct.unpack_from("<Q", data, at)[0]

    def value(kind: int, at: int) -> int:
        if kind == STRING:
            fields.append((at, 8))
            return at + 8 + u64(at)
        if kind == ARRAY:
            fields.extend([(at, 4), (at + 4, 8)])
            element, n, at = u32(at), u64(at + 4), at + 12
            for _ in range(n):
                at = value(element, at)
            return at
        fields.append((at, SCALAR_SIZES[kind]))
        return at + SCALAR_SIZES[kind]

    n_tensors, n_kv, at = u64(8), u64(16), 24
    for _ in range(n_kv):
        fields.append((at, 8))
        at += 8 + u64(at)
        fields.append((at, 4))
        at = value(u32(at), at + 4)
    for _ in range(n_tensors):
        fields.append((at, 8))
        at += 8 + u64(at)
        n_dims = u32(at)
        fields.append((at, 4))
        fields.extend((at + 4 + 8 * d, 8) for d in range(n_dims))
        at += 4 + 8 * n_dims
        fields.extend([(at, 4), (at + 4, 8)])
        at += 12
    return fields


class Choices:
    """The FuzzedDataProvider calls the mutators use, drawn from a generator seeded by the input."""

    def __init__(self, data: bytes) -> None:
        self.rng = random.Random(data)

    def ConsumeIntInRange(self, low: int, high: int) -> int:  # noqa: N802 (atheris' names)
        return self.rng.randint(low, high)

    def ConsumeInt(self, n_bytes: int) -> int:  # noqa: N802
        return self.rng.getrandbits(8 * n_bytes)

    def ConsumeBool(self) -> bool:  # noqa: N802
        return self.rng.random() < 0.5


class Harness:
    def __init__(self, target: str, mode: str, work: Path) -> None:
        from river_cpp.engine import _core
        from river_cpp.engine._ggml import set_ggml_verbosity

        set_ggml_verbosity(False)
        self.core = _core
        self.target, self.mode = target, mode
        self.backbone = work / "backbone.gguf"
        write_seed_backbone(self.backbone)
        self.seed = self.backbone.read_bytes()
        if target == "river":
            river = work / "river.gguf"
            engine = _core.Engine(str(self.backbone), 16, 16, 1)
            _core.build_river(engine, ["q8_0", "q4_0"], "q8_0", {}, str(river), 1)
            self.seed = river.read_bytes()
            self.engine = engine
        self.fields = header_fields(self.seed)
        self.path = work / "input.gguf"
        self.executions = 0
        self.accepted = 0
        self.errors: dict[str, int] = {}

    def mutate_structure(self, data: bytes, fdp) -> bytes:
        out = bytearray(self.seed)
        for _ in range(fdp.ConsumeIntInRange(1, 3)):
            at, width = self.fields[fdp.ConsumeIntInRange(0, len(self.fields) - 1)]
            pool = BOUNDARY_U64 if width == 8 else BOUNDARY_U32 if width == 4 else [0, 1, 0x7F, 0xFF, 0xFFFF]
            choice = fdp.ConsumeIntInRange(0, len(pool) + 1)
            if choice < len(pool):
                value = pool[choice]
            elif choice == len(pool):  # nudge the stored value
                value = int.from_bytes(out[at : at + width], "little") + fdp.ConsumeIntInRange(-64, 64)
            else:
                value = fdp.ConsumeInt(width)
            out[at : at + width] = (value % 2 ** (8 * width)).to_bytes(width, "little")
        if fdp.ConsumeBool():  # sometimes also cut the file
            out = out[: fdp.ConsumeIntInRange(0, len(out))]
        return bytes(out)

    def mutate_bytes(self, data: bytes, fdp) -> bytes:
        out = bytearray(self.seed)
        header_end = self.fields[-1][0] + 64
        for _ in range(fdp.ConsumeIntInRange(1, 8)):
            if not out:
                break
            # three edits in four land in the header, where the parser reads
            # (past the magic: a bad magic is one early, well-tested exit)
            at = (
                fdp.ConsumeIntInRange(4, max(4, min(len(out), header_end) - 1))
                if fdp.ConsumeIntInRange(0, 3)
                else fdp.ConsumeIntInRange(4, max(4, len(out) - 1))
            )
            kind = fdp.ConsumeIntInRange(0, 5)
            if kind == 0:
                out[at] = fdp.ConsumeInt(1) % 256
            elif kind == 1:
                out[at] ^= 1 << fdp.ConsumeIntInRange(0, 7)
            elif kind in (2, 3):
                width = 8 if kind == 2 else 4
                pool = BOUNDARY_U64 if width == 8 else BOUNDARY_U32
                value = pool[fdp.ConsumeIntInRange(0, len(pool) - 1)]
                out[at : at + width] = value.to_bytes(width, "little")
            elif kind == 4:
                del out[at : at + fdp.ConsumeIntInRange(1, 64)]
            else:
                out[at:at] = out[at : at + fdp.ConsumeIntInRange(1, 64)]
        if fdp.ConsumeIntInRange(0, 7) == 0:
            out = out[: fdp.ConsumeIntInRange(0, len(out))]
        return bytes(out)

    def __call__(self, data: bytes) -> None:
        # libFuzzer's inputs, uninstrumented, stay short and low in entropy: they seed
        # a generator rather than being consumed byte by byte
        fdp = Choices(data)
        data = self.mutate_structure(data, fdp) if self.mode == "structure" else self.mutate_bytes(data, fdp)
        self.path.write_bytes(data)
        self.executions += 1
        try:
            if self.target == "backbone":
                engine = self.core.Engine(str(self.path), 16, 16, 1)
                engine.forward(np.array([0, 1, min(2, engine.n_vocab - 1)], np.int32), False, False)
            else:
                self.engine.load_river(str(self.path))
                self.engine.reset()
                self.engine.set_exit([0.0, float("inf")], "cosine", 0, True)
                self.engine.forward(np.array([0, 1, 2], np.int32), False, True)
            self.accepted += 1
        except self.core.RiverError as e:
            kind = str(e).replace(str(self.path), "<file>")
            self.errors[" ".join(kind.split()[:6])] = self.errors.get(" ".join(kind.split()[:6]), 0) + 1
        if self.executions % 50_000 == 0:
            self.report()

    def report(self) -> None:
        print(
            f"fuzz_gguf {self.target} {self.mode}: {self.executions} executions, {self.accepted} loaded and ran, "
            f"{len(self.errors)} kinds of RiverError",
            file=sys.stderr,
            flush=True,
        )
        for kind, n in sorted(self.errors.items(), key=lambda item: -item[1])[:40]:
            print(f"    {n:8d}  {kind}", file=sys.stderr, flush=True)


def main() -> None:
    if sys.argv[1:2] == ["vocab"]:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import fuzz_vocab

        fuzz_vocab.main(sys.argv[2:])
        return
    import atheris

    if len(sys.argv) < 3 or sys.argv[1] not in ("backbone", "river") or sys.argv[2] not in ("bytes", "structure"):
        sys.exit(__doc__)
    target, mode = sys.argv[1], sys.argv[2]
    work = Path(
        tempfile.mkdtemp(prefix=f"fuzz-{target}-{mode}-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    )
    harness = Harness(target, mode, work)
    # libFuzzer's input only steers the mutations of the valid seed (see mutate_*):
    # without native coverage it could not grow a GGUF from random bytes.
    argv = [sys.argv[0], "-max_len=256", *sys.argv[3:]]
    atheris.Setup(argv, harness)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
