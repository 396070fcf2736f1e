// What check-exact measures: one matrix product through ggml's kernels (the plain
// layout or an extra buffer type) or through exact_mul_mat, and the outputs of a
// forward's named nodes, so that a tool can compare a row computed in a batch with
// the same row alone. Measures only; river_cpp/measure/check_exact.py judges.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"

namespace river {

// inputs x w^T for a matrix w of `type` given as its raw rows (`data`, n_out rows of
// n_in values), on the CPU backend with n_threads: by ggml_mul_mat with w in the plain
// CPU layout (buft_name empty) or in the extra buffer type buft_name, or by
// exact_mul_mat (exact), or by our own product with the kernels named own_kernels
// ("auto", "reference", "avx2", ...; see own_kernels.h). inputs: n_tokens rows of n_in
// floats; returns n_tokens rows of n_out. Throws for an unknown buffer type or one that
// does not take w, or own kernels this CPU lacks or that do not cover `type`.
std::vector<float> row_products(ggml_type type, const void * data, int64_t n_out, int64_t n_in, const float * inputs,
                                int64_t n_tokens, const std::string & buft_name, bool exact, int n_threads,
                                const std::string & own_kernels = "");

// The sizes of one attention: query rows, query heads, kv heads, keys, head size.
struct AttentionShape {
    int64_t n_tokens, n_head, n_head_kv, n_kv, head;
};

// softmax(kq_scale * q.k + mask) . v by our own attention (own_attention.h) on the CPU
// backend with n_threads, by the row kernels named `kernels` (own_attention_kernels()). q: [n_tokens][n_head][head]
// F32; k: [n_head_kv][n_kv] rows of head values of type_k (F16 or q8_0, as a cache holds them); v of type_v: F16
// transposed, [n_head_kv][head][n_kv], or q8_0 by rows as k; mask: [n_tokens][n_kv] of 0 or -inf. Returns
// [n_tokens][n_head * head]. Throws for sizes or types the op does not take.
std::vector<float> attention_rows(const AttentionShape & shape, const float * q, const void * k, ggml_type type_k,
                                  const void * v, ggml_type type_v, const float * mask, float kq_scale, int n_threads,
                                  const std::string & kernels = "auto");

// One node's output as a graph computed it: float32 values in ggml order.
struct TracedNode {
    std::string name;
    std::array<int64_t, 4> ne{};
    std::vector<float> values;
};

// Collects the F32 outputs of every named computing node (views, reshapes and
// permutes left out) of the graphs computed while installed as ggml's eval callback.
class NodeTrace {
public:
    static bool eval(ggml_tensor * t, bool ask, void * self);
    std::vector<TracedNode> nodes;
};

}  // namespace river
