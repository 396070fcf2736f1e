// Products by our own packed matrices (own_quant.h) inside ggml graphs: the packing of
// a model's matrices at load, and the two custom ops a product takes (quantize the
// columns, multiply). Batch-invariant by construction: a column's result is the same
// bits whatever the columns beside it and the thread count. Which matrices take it is
// the engine's choice (engine.cpp); which graph nodes use it, graph.cpp's.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "ggml_ptr.h"
#include "own_quant.h"
#include "weights.h"

namespace river {

// One packed matrix: [n_in, n_rows] of layout->type in our layout.
struct OwnMatrix {
    const own::TypeLayout * layout = nullptr;
    const own::Kernels * kernels = nullptr;
    int64_t n_in = 0;
    int64_t n_rows = 0;
    ggml_tensor * packed = nullptr;   // I8 [packed_size]
};

// The quantized columns of the inputs of one graph's own products, so that products of
// one input (q, k and v; gate and up) quantize it once.
class OwnInputs {
public:
    // cur's columns quantized to `format`: a node added to the graph at the first call.
    ggml_tensor * quantized(ggml_context * ctx, ggml_tensor * cur, own::ActFormat format);

private:
    std::map<std::pair<const ggml_tensor *, own::ActFormat>, ggml_tensor *> nodes_;
};

// m x cur for the first n_rows rows of m (n_rows <= m.n_rows): quantizes cur's columns
// (once per graph, in `inputs`) and multiplies.
// cur: [n_in, n_tokens] F32, rows contiguous -> [n_rows, n_tokens] F32
ggml_tensor * own_mul_mat(ggml_context * ctx, const OwnMatrix & m, ggml_tensor * cur, int64_t n_rows,
                          OwnInputs & inputs);

// One thread's share of a product: row groups [first, last) of m times n_cols quantized
// columns (column c at cols + c * col_bytes) into the first n_rows rows (n_rows <= m.n_rows)
// of out, column c at out + c * out_stride. gemm_op runs it on each thread of a graph;
// the microbenchmark (own_bench.cpp) on one.
void own_gemm_groups(const OwnMatrix & m, int64_t n_rows, int64_t first, int64_t last, const uint8_t * cols,
                     size_t col_bytes, int64_t n_cols, float * out, size_t out_stride);

// Whether own_mul_mat can take w: host memory in ggml's plain layout, a covered type,
// a 2-D matrix whose rows are whole blocks.
bool own_mul_mat_supports(const ggml_tensor * w);

class OwnMatrices {
public:
    OwnMatrices() = default;
    OwnMatrices(const OwnMatrices &) = delete;
    OwnMatrices & operator=(const OwnMatrices &) = delete;

    // Once, at load: packs each of `tensors` that lives in one of `host_buffers` (the mapped files),
    // is of a type in `types` and own_mul_mat_supports, multiplied by `kernels`. The
    // slots keep ggml's tensors (token lookups read them). Where the buffers map files
    // (`mapped`), a packed matrix's pages are given back to the system, to be read again
    // only if something does. Packs on n_threads threads; the bytes do not depend on it.
    void pack(const std::vector<ggml_tensor **> & tensors, const std::vector<ggml_backend_buffer_t> & host_buffers,
              const std::vector<ggml_type> & types, const own::Kernels & kernels, bool mapped, int n_threads);

    // The packed form of w, or of the matrix whose first rows the view w is; nullptr if none.
    const OwnMatrix * find(const ggml_tensor * w) const;

    size_t count() const { return matrices_.size(); }
    // How many matrices of each type were packed, by ggml's type name.
    std::map<std::string, size_t> counts() const;
    // The kernels the packed matrices are multiplied by ("" before any).
    std::string kernels_name() const { return kernels_ ? kernels_->name : ""; }

private:
    std::map<const ggml_tensor *, OwnMatrix> matrices_;
    const own::Kernels * kernels_ = nullptr;
    ContextPtr ctx_;
    BufferPtr buffer_;
};

}  // namespace river
