// Matrix products whose every output row is computed as a one-token step computes it:
// a ggml custom op that multiplies each column alone with the CPU type traits'
// vec_dot, so a verify batch's row i equals the same token's one-row forward bit for
// bit. Owns no tensors; which products take it is the graph builder's choice (graph.cpp).
#pragma once

#include "ggml.h"

namespace river {

// Whether ggml's CPU product by a matrix of `type` computes each column of a batch of
// two or more columns alone, in the same arithmetic whatever the batch's size and the
// thread count: true on x86 for the types llamafile's sgemm takes (F32, F16, BF16,
// Q8_0, Q4_0, Q5_0, IQ4_NL), whose only condition on the batch is two columns or more
// (each element one thread's sum over the whole row, in one order, whichever tile it
// falls in), and which no other batch-size path (the tiled K-quant GEMM) takes. Such a
// product stays exact with ggml's fast kernel if one-column batches are padded to two.
bool ggml_batches_alike(ggml_type type);

// Whether exact_mul_mat can multiply by `a`: host memory in the CPU's plain layout
// (not a repacked extra buffer type, not a device), of a type with CPU type traits.
bool exact_mul_mat_supports(const ggml_tensor * a);

// ggml_mul_mat(a, b) with a result that does not depend on how many columns b has
// or on the thread count: element (m, n) is vec_dot(a row m, b column n converted to
// a's vec_dot type), as ggml's one-token product computes it. Broadcasts a over b's
// dims 2 and 3 as ggml_mul_mat does; b may be a permuted view (its rows contiguous).
// a: [K, M, A2, A3], b: [K, N, B2, B3] F32 -> [M, N, B2, B3] F32
ggml_tensor * exact_mul_mat(ggml_context * ctx, ggml_tensor * a, ggml_tensor * b);

}  // namespace river
