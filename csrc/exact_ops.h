// Matrix products whose every output row is computed as a one-token step computes it:
// a ggml custom op that multiplies each column alone with the CPU type traits'
// vec_dot, so a verify batch's row i equals the same token's one-row forward bit for
// bit. Owns no tensors; which products take it is the graph builder's choice (graph.cpp).
#pragma once

#include "ggml.h"

namespace river {

// Whether ggml's CPU product by a matrix of `type` in the plain layout gives a column
// the same bits whatever the batch around it, as a probe finds: a random matrix times
// 1, 2, 9 and 17 columns (across llamafile's sgemm from 2 and the tiled K-quant GEMM
// from 8). Where it does (on x86 the sgemm types Q8_0, Q4_0, Q5_0: the same per-block
// sums as vec_dot), exact graphs keep ggml's faster batched kernel. Probed once per type
// and process; false for a type ggml cannot quantize without an importance matrix.
bool ggml_rows_alike(ggml_type type);

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
