"""Type stubs of the C++ engine module (csrc/bindings.cpp)."""

from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import numpy.typing as npt

class RiverError(ValueError): ...

def set_log_sink(sink: Optional[Callable[[int, str], None]]) -> None: ...
def build_river(
    engine: Engine,
    layer_types: Sequence[str],
    head_type: str,
    metadata: Mapping[str, str],
    out_path: str,
    n_threads: int,
    progress: Optional[Callable[[int, int], None]] = None,
) -> None: ...
def river_type_name(name: str) -> str: ...
def kv_cache_bytes(path: str, n_ctx: int, type_k: str = "f16", type_v: str = "f16") -> int:
    """The bytes of one sequence's KV cache of n_ctx positions, K and V of type_k /
    type_v ("f16", "q8_0"), for the graph backbone of the model at path (its header only)."""

def gguf_info(path: str, max_array: int = 1024) -> dict[str, Any]:
    """The validated header of a GGUF file, read with bounded reads (no mapping, no
    tensor data; milliseconds for any file size). Raises RiverError naming the file
    and the problem for a malformed one, exactly as a model load would.

    Returns {"version": int, "alignment": int, "data_offset": int, "file_size": int,
    "metadata": {key: value}, "types": {key: "uint32" | "string" | "array[string]" | ...},
    "tensors": [{"name": str, "type": ggml type name ("f32", "q8_0", ...),
    "shape": [ne0, ne1, ...] (ggml order), "n_bytes": int, "offset": int (from the
    start of the file)}]}. Values: int, float, bool, str (invalid UTF-8 replaced),
    lists for arrays of up to max_array elements; longer arrays (vocabularies,
    merges, scores) as {"element_type": str, "length": int}; max_array=-1 keeps all.
    """

def check_vocabulary(path: str) -> None:
    """Raise RiverError naming the file and the problem unless its vocabulary
    (tokenizer.* metadata) is one llama.cpp loads and tokenizes with without
    aborting the process: consistent array lengths and types, distinct token texts,
    special-token ids inside the vocabulary, merges of existing tokens, byte tokens
    where the tokenizer falls back to bytes. Run before every llama.cpp load."""

def devices(rpc_endpoints: Sequence[str] = ()) -> list[dict[str, Any]]:
    """ggml's devices, offloading ones first and the CPU last; of the RPC devices only
    those of rpc_endpoints. Each: {"name", "description", "type" ("cpu" | "gpu" |
    "igpu" | "accel"), "memory_free", "memory_total", "host_ptr_buffers"}."""

def graph_architectures() -> list[str]:
    """The general.architecture values river-cpp's own graph builds."""

def backends() -> list[str]:
    """The registered ggml backends ("CPU", "Vulkan", "RPC", ...), in registration order."""

def cpu_features() -> list[tuple[str, str]]:
    """The CPU backend's features as (name, value) pairs, e.g. ("AVX2", "1")."""

def ggml_version() -> dict[str, str]:
    """{"version", "commit"} of the ggml this process runs."""

def own_kernels() -> list[str]:
    """The own products' kernels this CPU runs, fastest first; "reference" (the definition) last."""

def own_instruction_peaks(kernels: str, seconds: float = 0.2) -> list[tuple[str, float]]:
    """[(instruction, int8 multiply-adds per second)] of the dot-product instructions the own
    kernels `kernels` use, measured on this thread: the kernels' own first (vpdpbusd ymm
    before zmm); [] for the reference."""

def own_product_seconds(
    kernels: str, type: str, n_rows: int, n_in: int, n_cols: Sequence[int], seconds: float = 0.2
) -> list[float]:
    """Seconds of one product of a random [n_rows, n_in] matrix of `type` (packed once) by n
    columns (quantized once) on this thread, by the own kernels `kernels`, as a graph's
    product computes it, for each n of n_cols: the fastest of repeated products over
    `seconds` each."""

def quantize_rows(type: str, values: npt.ArrayLike) -> npt.NDArray[np.uint8]:
    """values [n_out, n_in] quantized by ggml to `type`: the raw rows, as a GGUF file holds them."""

def row_products(
    type: str,
    data: npt.NDArray[np.uint8],
    n_out: int,
    n_in: int,
    inputs: npt.ArrayLike,
    buffer_type: str = "",
    exact: bool = False,
    n_threads: int = 1,
    own: str = "",
) -> npt.NDArray[np.float32]:
    """inputs @ w.T for the raw matrix w of `type` ([n_out, n_in]): by ggml_mul_mat from the
    plain layout or the extra buffer type, by the exact product, or by our own product with
    the kernels named `own`."""

def cpu_extra_buffer_types() -> list[str]:
    """The CPU device's extra buffer types ("AMX", "CPU_REPACK", ...), in ggml's order
    of preference. Which of them are safe to use is river_cpp.engine.probes.extra_bufts's business."""

def probe_matmul(
    buffer_type: str,
    type: str,
    weights: npt.ArrayLike,
    inputs: npt.ArrayLike,
    n_threads: int = 1,
) -> Optional[tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]]:
    """inputs [n_tokens, n_in] times weights [n_out, n_in] quantized to `type`, computed
    with the weights in the plain CPU buffer and in the extra `buffer_type`: (plain, extra),
    each [n_tokens, n_out]; None where that buffer type does not multiply `type`. Run it in
    a child process: a broken extra type may crash it (river_cpp.engine.probes.extra_bufts does)."""

def has_rpc() -> bool: ...
def add_rpc_server(endpoint: str) -> None:
    """Register the devices of the RPC server at host:port (the caller checks first
    that it answers: ggml's client aborts on a failed connection)."""

def serve_rpc(endpoint: str, n_threads: int) -> None:
    """Serve this machine's CPU over ggml RPC at host:port; does not return."""

class ExitConfig:
    """When and how tokens leave the backbone, prepared once per policy and handed to
    every Engine.forward that runs under it. thresholds[d]: after d backbone layers a
    batch exits when its least similar token's signal exceeds it (inf: never there);
    signal: "cosine" or "update_norm"; tail_layers: exited tokens return to the
    backbone for the last layers; river_head: exited tokens use the river's LM head;
    exit_vocab: exited tokens score only ids [0, exit_vocab) (0: all)."""

    def __init__(
        self,
        thresholds: Sequence[float],
        signal: str = "cosine",
        tail_layers: int = 0,
        river_head: bool = False,
        exit_vocab: int = 0,
    ) -> None: ...
    @property
    def thresholds(self) -> list[float]: ...
    @property
    def tail_layers(self) -> int: ...
    @property
    def river_head(self) -> bool: ...
    @property
    def exit_vocab(self) -> int: ...

class Engine:
    def __init__(
        self,
        path: str,
        n_ctx: int,
        n_batch: int,
        n_threads: int,
        use_mmap: bool = True,
        cpu_extra_bufts: Sequence[str] = (),
        reuse_graphs: bool = True,
        exact: str = "on",
        exact_rows: int = 129,
        own_types: Sequence[str] = (),
        own_kernels: str = "auto",
        n_seq: int = 1,
        own_attention: bool = True,
        type_k: str = "f16",
        type_v: str = "f16",
    ) -> None:
        """n_seq: sequences the KV cache holds, n_ctx positions each.
        own_attention: our own batch-invariant attention in every layer that computes
        on the CPU over a cache in host memory (see attention_plan); False: ggml's
        attention everywhere.
        type_k, type_v: the types the KV cache stores K and V in, "f16" or "q8_0"
        (RiverError for others, or where q8_0 blocks do not tile a head); a q8_0 V
        needs our attention in every layer, and a q8_0 cache the host (place() says so).
        cpu_extra_bufts: the CPU extra buffer types (by name) host matrices may be
        repacked into (none by default); RiverError for a name this ggml lacks.
        own_types: the weight types ("q4_K", ...) whose host matrices take our own
        batch-invariant products in every forward, on own_kernels ("auto": the fastest
        here; see own_kernels()); matrices they take are not repacked.
        reuse_graphs: keep decode graphs for later steps (False: build every graph afresh).
        exact: in batches of at most exact_rows tokens that are not a prompt (see
        forward), each row as a one-token step computes it, bit for bit: "on" (except
        products by F32/F16/BF16 and by repacked matrices), "bitwise" (all: the
        backbone is not repacked) or "off" (ggml's kernels by batch size). Attention
        needs none of it where ours takes the layer: its rows are those bits in any batch."""
    def forward(
        self,
        ids: npt.ArrayLike,
        last_only: bool,
        exit: Optional[ExitConfig] = None,
        prompt: bool = False,
        seq: int = 0,
    ) -> npt.NDArray[np.float32]:
        """Append ids to sequence `seq` and return their logits ([len(ids) or 1,
        n_vocab]); tokens leave the backbone as `exit` says (None: every token runs the
        full backbone). prompt: the ids are a prompt, which every decoding prefills
        alike, so its rows take the fastest kernels whatever the exact mode (ours where
        they cover a matrix)."""
    def forward_many(
        self, rows: Sequence[tuple[int, npt.ArrayLike, bool, bool]], exit: Optional[ExitConfig] = None
    ) -> list[npt.NDArray[np.float32]]:
        """Several sequences' tokens in one batch of at most n_batch rows: rows of (seq,
        ids, last_only, prompt), each sequence at most once; their logits in that order,
        each row as its sequence alone computes it (bit for bit where the products are
        batch-invariant). exit: None (the full backbone) or a configuration that exits
        at depth 0 (see decides_by_check). RiverError, every sequence as it was, else."""
    def decides_by_check(self, exit: ExitConfig) -> bool:
        """Whether a forward under `exit` decides its depth by a similarity check over
        its batch, so that it cannot share a batch with other sequences."""
    def check_exit(self, exit: ExitConfig) -> None:
        """RiverError unless `exit` fits this model (forward checks the one it is given)."""
    def load_river(self, path: str) -> None: ...
    def check_files(self) -> None:
        """Raise RiverError when the backbone or river file changed on disk (inode,
        size or mtime) since it was mapped; files read into memory never raise.
        forward() calls it first."""
    def lose_device(self, name: str) -> None:
        """The device `name` has gone (its RPC server went away): forward and read_kv
        raise RiverError from then on, and the engine, when freed, leaks what lives
        there (weights, cache, compute buffers) instead of waiting on the dead connection."""
    def place(
        self,
        backbone_layers: Sequence[str],
        river_layers: Sequence[str],
        backbone_head: str,
        river_head: str,
        kv_cache: str,
    ) -> None:
        """Put weights and cache on the named devices ("CPU": the host), once, after
        load_river and before the first forward (which otherwise places all on the host)."""
    def attention_plan(
        self,
        backbone_layers: Sequence[str],
        river_layers: Sequence[str],
        backbone_head: str,
        river_head: str,
        kv_cache: str,
    ) -> dict[str, list[str]]:
        """Which attention each layer would take under this placement (place()'s
        arguments): {"backbone_layers": [...], "river_layers": [...]}, per layer why
        ggml's attention takes it ("" where our own does): own_attention off, the cache
        or the layer on a device, or a cache our op does not read."""
    @property
    def attention(self) -> dict[str, list[str]]:
        """attention_plan of the placement place() applied (empty lists before)."""
    @property
    def placed(self) -> bool: ...
    @property
    def placement(self) -> dict[str, Any]: ...
    def placement_sizes(self) -> dict[str, Any]:
        """Bytes of each placeable part: backbone_layers, river_layers (lists),
        backbone_head, river_head, kv_cache."""
    def placed_bytes(self) -> dict[str, int]:
        """Bytes of weight copies and cache per device name, after place()."""
    @property
    def repacked_tensors(self) -> int: ...
    @property
    def repacked_by_buffer_type(self) -> dict[str, int]:
        """How many host matrices place() put into each CPU extra buffer type."""
    @property
    def own_products(self) -> dict[str, int]:
        """How many matrices place() packed for our own products, by weight type."""
    @property
    def own_kernels(self) -> str:
        """The kernels our own products run on ("" where no matrix takes them)."""
    @property
    def graph_stats(self) -> dict[str, float]:
        """{"builds", "reuses", "build_seconds", "compute_seconds"} since the last reset, and
        "kept_graphs", "kept_bytes": the graphs kept for reuse now and their compute buffers."""
    def reset_graph_stats(self) -> None: ...
    @property
    def fallback_ops(self) -> dict[str, list[str]]:
        """Per device name, the ops of the graphs built so far that the device cannot
        run and that ggml's scheduler ran on the CPU instead (empty: none)."""
    @property
    def reuse_graphs(self) -> bool: ...
    def read_kv(
        self, layer: int, pos: int, n: int, seq: int = 0
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]: ...
    def save_kv(self, n: int, seq: int = 0) -> bytes:
        """A sequence's first n positions, every layer's K and V (the river's rows among them), as bytes."""
    def load_kv(self, n: int, data: bytes | bytearray | memoryview, seq: int = 0) -> None:
        """Put back what save_kv(n) returned: the sequence then holds those n positions."""
    def rewind(self, n_past: int, seq: int = 0) -> None: ...
    def reset(self, seq: int = 0) -> None: ...
    def seq_n_past(self, seq: int) -> int:
        """Positions sequence `seq` holds (RiverError for one the cache does not hold)."""
    @property
    def n_seq(self) -> int: ...
    @property
    def type_k(self) -> str: ...
    @property
    def type_v(self) -> str: ...
    @property
    def kv_bytes(self) -> int:
        """The bytes the KV cache holds, as allocated (0 before place())."""
    n_threads: int
    @property
    def has_river(self) -> bool: ...
    @property
    def last_exit_layers(self) -> npt.NDArray[np.int32]: ...
    @property
    def last_similarities(self) -> npt.NDArray[np.float32]: ...
    @property
    def n_past(self) -> int:
        """Positions sequence 0 holds."""
    @property
    def n_ctx(self) -> int: ...
    @property
    def n_layer(self) -> int: ...
    @property
    def n_vocab(self) -> int: ...
    @property
    def n_embd(self) -> int: ...
    @property
    def n_embd_kv(self) -> int: ...
    @property
    def arch(self) -> str: ...
