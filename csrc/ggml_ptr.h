// Owning pointers for ggml's C handles (a context, a backend), and a context that
// holds only tensor metadata: the probes and the river builder make small graphs of
// their own, and each freed its handles through a deleter of its own before.
#pragma once

#include <memory>

#include "ggml-backend.h"
#include "ggml.h"

namespace river {

struct ContextDeleter {
    void operator()(ggml_context * ctx) const { ggml_free(ctx); }
};
using ContextPtr = std::unique_ptr<ggml_context, ContextDeleter>;

struct BackendDeleter {
    void operator()(ggml_backend_t backend) const { ggml_backend_free(backend); }
};
using BackendPtr = std::unique_ptr<ggml_backend, BackendDeleter>;

// A context for `n_tensors` tensors and one graph, their data allocated elsewhere.
inline ContextPtr new_metadata_context(size_t n_tensors) {
    ggml_init_params params{ggml_tensor_overhead() * n_tensors + ggml_graph_overhead(), nullptr, true};
    return ContextPtr(ggml_init(params));
}

}  // namespace river
