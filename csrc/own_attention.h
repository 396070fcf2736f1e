// Our own attention over a KV cache in host memory: a ggml custom op that computes each
// query row and head alone, in one order fixed by that row's keys only, so a row's result
// is the same bits whatever the batch, the prompt's cut, the cache padding or the thread
// count. Which attention takes it is the graph builder's choice (graph.cpp).
#pragma once

#include <string>
#include <vector>

#include "ggml.h"

namespace river {

// Keys per tile of the online softmax: its running maximum is raised (and the
// accumulator rescaled) at most once per tile.
constexpr int64_t k_attention_tile = 32;

// Whether own_attention reads K and V of these types with heads of `head` values: F16
// or q8_0 (whose blocks of 32 tile a head), a head size that is a multiple of 8.
bool own_attention_reads(ggml_type type_k, ggml_type type_v, int64_t head);

// Whether own_attention can read these cache tensors: of types it reads
// (own_attention_reads), in host memory.
bool own_attention_supports(const ggml_tensor * cache_k, const ggml_tensor * cache_v, int64_t head);

// softmax(kq_scale * q.k + mask) . v per query row and head, as a ggml custom op. For
// row t and query head h (reading kv head h / (n_head / n_head_kv)): keys in tiles of
// k_attention_tile from key 0; a key whose mask is -inf is skipped (its cells weigh in
// nowhere, whatever they hold: NaN in a cache's unused cells changes no bit); scores as
// kq_scale * (a dot product in 8 lanes, element i into lane i % 8, summed in a fixed tree)
// + mask; an online softmax in F32 with our own exp; out = acc / sum, where acc adds each
// tile's weighted values in 8 lanes (key j into lane j % 8, summed in the same tree).
// kq_scale must outlive the graph (graphs are kept for reuse). kernels: "auto" (the
// fastest here) or one of own_attention_kernels(), which all give the same bits.
// Each tile's keys and values are converted to F32 first (F16 exactly; q8_0 as d * q, one
// rounding), so a quantized cache keeps every identity above.
// q: [head, n_head, n_tokens] F32, rows contiguous (any strides beyond)
// k: [head, n_kv, n_head_kv] F16 or q8_0 view of the cache; v: an F16 view of the
// transposed cache, [n_kv, head, n_head_kv], or a q8_0 view of the cache by rows, [head,
// n_kv, n_head_kv], as k; mask: [n_kv, n_tokens] F32 -> [head * n_head, n_tokens] F32
ggml_tensor * own_attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * mask,
                            const float * kq_scale, const std::string & kernels = "auto");

// The row kernels this CPU runs: "baseline", and "avx2" where it has AVX2 and F16C.
std::vector<std::string> own_attention_kernels();

}  // namespace river
