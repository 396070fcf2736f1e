"""check-exact: whether a token computed as row i of a k-row forward (a verify) equals
the same token computed alone (a plain step), and which ops make them differ.

Two measurements (`river-cpp check-exact MODEL` prints both):

- ops: one real matrix of each weight type in the file, and attention's two products
  on an F16 cache at two depths, multiplied by k columns at once and by each column
  alone, through ggml's own kernels (the plain layout and each extra buffer type that
  takes the matrix), through the exact product (csrc/exact_ops.*) and through our own
  products (csrc/own_*) where they cover the type; the largest |difference| of a row per k.
- forward: a real text at several cache depths d. Position d + i is computed as plain
  decoding computes it (d + i positions cached, one token) and as row i of a k-row
  forward from depth d; per named node of the graph (`wq-3`, `kq-3`, `ffn_down-3`, ...),
  through ggml's eval callback, the largest |difference| over rows and layers, the node
  where a row first differs, and the logits'.

Measures and reports; decides nothing (the engine's exact_rows does).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from river_cpp.engine.probes.own_products import COVERED, NONE, OwnProducts

# Positions cached before the compared ones: below and above 512 cells (where ggml's
# CPU attention changes paths in llama.cpp's flash attention; our graph's n_kv padding
# changes at every 256).
DEPTHS = (100, 600)
MAX_K = 9
# A real matrix's first rows are enough to see a kernel's arithmetic.
MAX_OP_ROWS = 1024
SEED = 0


@dataclass(frozen=True)
class OpRow:
    """One product through one kernel: the largest |row in a batch - row alone| per k."""

    op: str  # "blk.0.ffn_down.weight", "kq (F16 cache, n_kv 256)", ...
    type: str  # the matrix's ggml type
    kernel: str  # "ggml", "ggml CPU_REPACK", "exact_mul_mat"
    diffs: dict[int, float]  # k -> largest |difference| over the k rows


@dataclass(frozen=True)
class NodeRow:
    """One kind of graph node (`wq`, `kq`, `result_output`, ...) in the forward check."""

    node: str
    type: str  # the weight type of a product ("" for other nodes)
    diffs: dict[int, float]  # k -> largest |difference| over depths, rows and layers
    first: int = 0  # how many compared rows first differed at this node


@dataclass
class ForwardCheck:
    """The forward measurement: per node kind, and the logits."""

    nodes: list[NodeRow] = field(default_factory=list)
    logits: dict[int, float] = field(default_factory=dict)  # k -> largest |difference|
    rows: int = 0  # rows compared
    identical_rows: int = 0  # rows whose logits were bit-identical


# ---------------------------------------------------------------- ops


def _matrix(info, tensor) -> tuple[np.ndarray, int, int]:
    """The raw bytes of a 2-D tensor's first rows, and (n_out, n_in)."""
    n_in, n_out = int(tensor.shape[0]), int(tensor.shape[1])
    rows = min(n_out, MAX_OP_ROWS)
    data = np.memmap(info.path, dtype=np.uint8, mode="r", offset=tensor.offset, shape=(tensor.n_bytes,))
    return np.ascontiguousarray(data[: tensor.n_bytes // n_out * rows]), rows, n_in


def _row_diffs(product, inputs: np.ndarray, ks: Sequence[int]) -> dict[int, float]:
    """k -> the largest |product(inputs[:k])[i] - product(inputs[i:i+1])[0]| over i < k."""
    alone = np.stack([product(inputs[i : i + 1])[0] for i in range(max(ks))])
    return {k: float(np.max(np.abs(product(inputs[:k]) - alone[:k]))) for k in ks}


def op_table(
    path: Union[str, Path],
    *,
    ks: Sequence[int] = tuple(range(2, MAX_K + 1)),
    n_threads: int = 2,
    buffer_types: Optional[Sequence[str]] = None,
    depths: Sequence[int] = (256, 768),
    own_kernels: str = "",
) -> list[OpRow]:
    """The ops measurement on the file at `path`: one matrix of each 2-D weight type
    (the first such tensor), and attention's products at cache depths `depths` (n_kv
    cells). buffer_types: the extra buffer types to try (None: every one ggml has).
    own_kernels: also our own products on these kernels, for the types they cover ("": not)."""
    from river_cpp.engine import _core
    from river_cpp.engine.files.gguf_info import GgufInfo

    info = GgufInfo.read(path)
    extra = list(_core.cpu_extra_buffer_types() if buffer_types is None else buffer_types)
    rng = np.random.default_rng(SEED)
    rows: list[OpRow] = []

    def measure(op: str, type_name: str, data: np.ndarray, n_out: int, n_in: int, inputs: np.ndarray) -> None:
        kernels = [("ggml", "", False, "")] + [(f"ggml {b}", b, False, "") for b in extra]
        kernels.append(("exact_mul_mat", "", True, ""))
        if own_kernels and type_name in COVERED:
            kernels.append((f"own ({own_kernels})", "", False, own_kernels))
        for kernel, buft, exact, own in kernels:

            def product(x, buft=buft, exact=exact, own=own):
                return _core.row_products(type_name, data, n_out, n_in, x, buft, exact, n_threads, own)

            try:
                rows.append(OpRow(op, type_name, kernel, _row_diffs(product, inputs, ks)))
            except ValueError:  # this extra type does not take the matrix
                continue

    seen: set[str] = set()
    for tensor in info.tensors:
        if len(tensor.shape) != 2 or tensor.type in seen or tensor.type == "f32":
            continue
        seen.add(tensor.type)
        data, n_out, n_in = _matrix(info, tensor)
        inputs = rng.standard_normal((max(ks), n_in), dtype=np.float32)
        measure(tensor.name, tensor.type, data, n_out, n_in, inputs)

    head = int(info.get(f"{info.arch}.attention.key_length", 0)) or int(
        info.get(f"{info.arch}.embedding_length") // info.get(f"{info.arch}.attention.head_count")
    )
    for n_kv in depths:
        # scores: K [n_kv, head] x q; values: V [head, n_kv] x probabilities
        keys = rng.standard_normal((n_kv, head)).astype(np.float16)
        q = rng.standard_normal((max(ks), head), dtype=np.float32)
        measure(f"kq (F16 cache, n_kv {n_kv})", "f16", keys.view(np.uint8).ravel(), n_kv, head, q)
        values = rng.standard_normal((head, n_kv)).astype(np.float16)
        p = rng.random((max(ks), n_kv), dtype=np.float32)
        p /= p.sum(axis=1, keepdims=True)
        measure(f"kqv (F16 cache, n_kv {n_kv})", "f16", values.view(np.uint8).ravel(), head, n_kv, p)
    return rows


# ---------------------------------------------------------------- forward


def _engine(
    path: Union[str, Path],
    n_ctx: int,
    n_threads: int,
    extra_bufts: Sequence[str],
    exact: str,
    own: OwnProducts,
    own_attention: bool,
):
    """An engine on the file at `path` as the forward and thread checks measure it."""
    from river_cpp.engine import _core

    return _core.Engine(
        str(path),
        n_ctx=n_ctx,
        n_batch=512,
        n_threads=n_threads,
        cpu_extra_bufts=list(extra_bufts),
        exact=exact,
        own_attention=own_attention,
        **own.engine_arguments(),
    )


def text_tokens(tokenizer, n: int) -> list[int]:
    """At least n tokens of real text: standard-library source code."""
    import difflib
    import textwrap

    text = ""
    for module in (difflib, textwrap, inspect):
        text += inspect.getsource(module)
        ids = tokenizer.tokenize(text)
        if len(ids) >= n:
            return ids[:n]
    raise ValueError(f"not {n} tokens of text")


def _kind(name: str) -> tuple[str, int]:
    """ "wq-3" -> ("wq", 3); "result_output" -> ("result_output", -1)."""
    match = re.fullmatch(r"(.*)-(\d+)", name)
    return (match.group(1), int(match.group(2))) if match else (name, -1)


def _token_row(values: np.ndarray, row: int, node: str, pos: int) -> np.ndarray:
    """Row `row` of a traced node's values (numpy order, the reverse of ggml's). Scores
    keep only the positions the token sees (the rest are masked)."""
    if node in ("Qcur", "Kcur"):  # [head, n_head, n_tokens]
        return values[0, row]
    if node in ("kq", "kq_soft_max"):  # [n_kv, n_tokens, n_head]
        return values[0, :, row, : pos + 1]
    if node == "kqv":  # [head, n_tokens, n_head]
        return values[0, :, row]
    return values[0, 0, row]  # [n, n_tokens]


def forward_check(
    path: Union[str, Path],
    *,
    depths: Sequence[int] = DEPTHS,
    ks: Sequence[int] = tuple(range(2, MAX_K + 1)),
    n_threads: int = 2,
    extra_bufts: Sequence[str] = (),
    exact: str = "on",
    n_ctx: int = 2048,
    own: OwnProducts = NONE,
    own_attention: bool = True,
) -> ForwardCheck:
    """The forward measurement on the file at `path` (see the module's docstring), on
    an engine with `extra_bufts`, `exact` ("on", "bitwise" or "off"), our own products
    `own` (river_cpp.engine.probes.own_products; NONE: ggml's kernels) and our own attention
    (one node, `kqv_out`) unless own_attention is False (ggml's: `kq`, `kq_soft_max`,
    `kqv`, then `kqv_out`)."""
    from river_cpp.engine import _core
    from river_cpp.engine.compute.tokenizer import Tokenizer
    from river_cpp.engine.files.gguf_info import GgufInfo

    engine = _engine(path, n_ctx, n_threads, extra_bufts, exact, own, own_attention)
    info = GgufInfo.read(path)
    weight_type = {}
    for tensor in info.tensors:
        match = re.fullmatch(r"blk\.\d+\.(\w+)\.weight", tensor.name)
        if match:
            weight_type.setdefault(
                {"attn_q": "wq", "attn_k": "wk", "attn_v": "wv", "attn_output": "wo"}.get(
                    match.group(1), match.group(1)
                ),
                tensor.type,
            )
    output = info.tensor("output.weight") or info.tensor("token_embd.weight")
    weight_type["result_output"] = output.type if output else ""
    weight_type["kq"] = weight_type["kqv"] = "f16 (cache)"
    # without post-norms a product keeps the name of the sublayer's output
    weight_type["attn_out"], weight_type["ffn_out"] = weight_type.get("wo", ""), weight_type.get("ffn_down", "")

    ids = text_tokens(Tokenizer(str(path)), max(depths) + max(ks))
    check = ForwardCheck()
    diffs: dict[str, dict[int, float]] = {}
    first: dict[str, int] = {}
    for depth in depths:
        engine.reset()
        engine.forward(ids[:depth], True)
        alone = []
        for i in range(max(ks)):  # plain decoding of the next tokens
            alone.append(_core.trace_forward(engine, ids[depth + i : depth + i + 1], False))
        for k in ks:
            engine.rewind(depth)
            logits, nodes = _core.trace_forward(engine, ids[depth : depth + k], False)
            for i in range(k):
                single_logits, single_nodes = alone[i]
                diff = float(np.max(np.abs(logits[i] - single_logits[0])))
                check.logits[k] = max(check.logits.get(k, 0.0), diff)
                check.rows += 1
                check.identical_rows += int(np.array_equal(logits[i], single_logits[0]))
                found = False
                single_by_name = dict(single_nodes)
                for name, values in nodes:
                    node, _ = _kind(name)
                    single = single_by_name.get(name)
                    if single is None or node.startswith(("node_", "leaf_")):
                        continue
                    a = _token_row(values, i, node, depth + i)
                    b = _token_row(single, 0, node, depth + i)
                    d = float(np.max(np.abs(a - b))) if a.shape == b.shape else float("nan")
                    per_k = diffs.setdefault(node, {})
                    per_k[k] = max(per_k.get(k, 0.0), d)
                    if not found and d != 0.0:
                        first[node] = first.get(node, 0) + 1
                        found = True
    check.nodes = [NodeRow(node, weight_type.get(node, ""), per_k, first.get(node, 0)) for node, per_k in diffs.items()]
    return check


def threads_check(
    path: Union[str, Path],
    thread_counts: Sequence[int],
    *,
    depth: int = 600,
    k: int = MAX_K,
    extra_bufts: Sequence[str] = (),
    exact: str = "on",
    own: OwnProducts = NONE,
    own_attention: bool = True,
) -> dict[int, float]:
    """Whether logits depend on the thread count: the prompt's last position, k plain
    steps and a k-row forward from `depth`, on engines of each count (our own attention
    unless own_attention is False); n_threads -> the largest |difference| from the first
    count's logits (0: bit-identical)."""
    from river_cpp.engine.compute.tokenizer import Tokenizer

    ids = text_tokens(Tokenizer(str(path)), depth + k)
    results = {}
    for n_threads in thread_counts:
        engine = _engine(path, 2048, n_threads, extra_bufts, exact, own, own_attention)
        rows = [engine.forward(ids[:depth], True)]
        rows += [engine.forward(ids[depth + i : depth + i + 1], True) for i in range(k)]
        engine.rewind(depth)
        rows.append(engine.forward(ids[depth : depth + k], False))
        results[n_threads] = np.concatenate(rows)
    first = results[thread_counts[0]]
    return {n: float(np.max(np.abs(logits - first))) for n, logits in results.items()}


# ---------------------------------------------------------------- report


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _fmt(value: float) -> str:
    return "0" if value == 0.0 else f"{value:.2g}"


def format_ops(rows: Sequence[OpRow]) -> str:
    """The ops measurement as a markdown table, a column per k."""
    ks = sorted({k for row in rows for k in row.diffs})
    body = [[row.op, row.type, row.kernel] + [_fmt(row.diffs[k]) for k in ks] for row in rows]
    return _table(["product", "type", "kernel"] + [f"k={k}" for k in ks], body)


def format_forward(check: ForwardCheck) -> str:
    """The forward measurement as a markdown table (a row per node kind, in graph
    order) and a line on the logits."""
    ks = sorted(check.logits)
    body = [[row.node, row.type, str(row.first)] + [_fmt(row.diffs.get(k, 0.0)) for k in ks] for row in check.nodes]
    body.append(["logits", "", ""] + [_fmt(check.logits[k]) for k in ks])
    table = _table(["node", "weights", "first differs"] + [f"k={k}" for k in ks], body)
    return f"{table}\n\nrows with bit-identical logits: {check.identical_rows} of {check.rows}"
