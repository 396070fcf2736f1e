#include "exact_check.h"

#include <memory>

#include "common.h"
#include "cpu_layout.h"
#include "devices.h"
#include "exact_ops.h"
#include "ggml-alloc.h"
#include "ggml-cpu.h"
#include "ggml_ptr.h"
#include "offload.h"
#include "own_attention.h"
#include "own_kernels.h"
#include "own_mul_mat.h"
#include "weights.h"

namespace river {

namespace {

bool is_layout_op(ggml_op op) {
    return op == GGML_OP_NONE || op == GGML_OP_VIEW || op == GGML_OP_RESHAPE || op == GGML_OP_PERMUTE ||
           op == GGML_OP_TRANSPOSE;
}

BackendPtr cpu_backend(int n_threads) {
    if (n_threads <= 0) {
        throw Error("n_threads must be positive, got " + std::to_string(n_threads));
    }
    load_backends();
    ggml_backend_dev_t cpu_dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!cpu_dev) {
        throw Error("this ggml has no CPU device");
    }
    BackendPtr cpu(ggml_backend_dev_init(cpu_dev, nullptr));
    if (!cpu) {
        throw Error("cannot initialise the ggml CPU backend");
    }
    ggml_backend_cpu_set_n_threads(cpu.get(), n_threads);
    return cpu;
}

}  // namespace

std::vector<float> row_products(ggml_type type, const void * data, int64_t n_out, int64_t n_in, const float * inputs,
                                int64_t n_tokens, const std::string & buft_name, bool exact, int n_threads,
                                const std::string & own_kernels) {
    if (n_out <= 0 || n_tokens <= 0 || n_in <= 0 || n_in % ggml_blck_size(type) != 0) {
        throw Error(std::string("row_products needs rows whose length is a positive multiple of ") +
                    std::to_string(ggml_blck_size(type)) + " for " + ggml_type_name(type));
    }
    BackendPtr cpu = cpu_backend(n_threads);
    ggml_backend_dev_t cpu_dev = ggml_backend_get_device(cpu.get());
    ggml_backend_buffer_type_t weight_buft =
        buft_name.empty() ? ggml_backend_cpu_buffer_type() : cpu_extra_buffer_type(buft_name);
    ContextPtr weight_ctx = new_metadata_context(1);
    // [n_in, n_out]
    ggml_tensor * w = ggml_new_tensor_2d(weight_ctx.get(), type, n_in, n_out);
    if (!buft_name.empty() && !device_multiplies(cpu_dev, weight_buft, w)) {
        throw Error(buft_name + " does not take a " + ggml_type_name(type) + " matrix of " + std::to_string(n_out) +
                    " x " + std::to_string(n_in));
    }
    BufferPtr weight_buffer(ggml_backend_alloc_ctx_tensors_from_buft(weight_ctx.get(), weight_buft));
    if (!weight_buffer) {
        throw Error(std::string("cannot allocate a matrix in ") + ggml_backend_buft_name(weight_buft));
    }
    ggml_backend_buffer_set_usage(weight_buffer.get(), GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    ggml_backend_tensor_set(w, data, 0, ggml_nbytes(w));   // an extra type repacks here

    ContextPtr ctx = new_metadata_context(3);   // x, y and (own products) the quantized x
    // [n_in, n_tokens] -> [n_out, n_tokens]
    ggml_tensor * x = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, n_in, n_tokens);
    OwnMatrices own;
    OwnInputs own_inputs;
    const OwnMatrix * packed = nullptr;
    if (!own_kernels.empty()) {
        if (!own::layout_of(type)) {
            throw Error(std::string("our own products do not cover ") + ggml_type_name(type));
        }
        own.pack({&w}, {weight_buffer.get()}, {type}, own::kernels_named(own_kernels), false, n_threads);
        packed = own.find(w);
    }
    ggml_tensor * y = packed  ? own_mul_mat(ctx.get(), *packed, x, n_out, own_inputs)
                      : exact ? exact_mul_mat(ctx.get(), w, x)
                              : ggml_mul_mat(ctx.get(), w, x);
    ggml_cgraph * graph = ggml_new_graph(ctx.get());
    ggml_build_forward_expand(graph, y);
    BufferPtr buffer(ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), ggml_backend_cpu_buffer_type()));
    if (!buffer) {
        throw Error("cannot allocate the activations");
    }
    ggml_backend_tensor_set(x, inputs, 0, ggml_nbytes(x));
    if (ggml_backend_graph_compute(cpu.get(), graph) != GGML_STATUS_SUCCESS) {
        throw Error(std::string("a product through ") + ggml_backend_buft_name(weight_buft) + " failed");
    }
    std::vector<float> out(static_cast<size_t>(n_out * n_tokens));
    ggml_backend_tensor_get(y, out.data(), 0, ggml_nbytes(y));
    return out;
}

std::vector<float> attention_rows(const AttentionShape & shape, const float * q, const void * k, ggml_type type_k,
                                  const void * v, ggml_type type_v, const float * mask, float kq_scale, int n_threads,
                                  const std::string & kernels) {
    const auto [n_tokens, n_head, n_head_kv, n_kv, head] = shape;
    if (n_tokens <= 0 || n_kv <= 0 || n_head_kv <= 0 || n_head % n_head_kv != 0 || head <= 0 || head % 8 != 0) {
        throw Error("attention_rows needs positive sizes, n_head a multiple of n_head_kv and head a multiple of 8");
    }
    if (!own_attention_reads(type_k, type_v, head)) {
        throw Error(std::string("own attention does not read K of ") + ggml_type_name(type_k) + " and V of " +
                    ggml_type_name(type_v) + " with heads of " + std::to_string(head));
    }
    BackendPtr cpu = cpu_backend(n_threads);
    ContextPtr ctx = new_metadata_context(5);
    ggml_tensor * tq = ggml_new_tensor_3d(ctx.get(), GGML_TYPE_F32, head, n_head, n_tokens);
    ggml_tensor * tk = ggml_new_tensor_3d(ctx.get(), type_k, head, n_kv, n_head_kv);
    ggml_tensor * tv = type_v == GGML_TYPE_F16 ? ggml_new_tensor_3d(ctx.get(), type_v, n_kv, head, n_head_kv)
                                               : ggml_new_tensor_3d(ctx.get(), type_v, head, n_kv, n_head_kv);
    ggml_tensor * tmask = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, n_kv, n_tokens);
    ggml_tensor * out = own_attention(ctx.get(), tq, tk, tv, tmask, &kq_scale, kernels);
    ggml_cgraph * graph = ggml_new_graph(ctx.get());
    ggml_build_forward_expand(graph, out);
    BufferPtr buffer(ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), ggml_backend_cpu_buffer_type()));
    if (!buffer) {
        throw Error("cannot allocate the attention's tensors");
    }
    ggml_backend_tensor_set(tq, q, 0, ggml_nbytes(tq));
    ggml_backend_tensor_set(tk, k, 0, ggml_nbytes(tk));
    ggml_backend_tensor_set(tv, v, 0, ggml_nbytes(tv));
    ggml_backend_tensor_set(tmask, mask, 0, ggml_nbytes(tmask));
    if (ggml_backend_graph_compute(cpu.get(), graph) != GGML_STATUS_SUCCESS) {
        throw Error("our own attention failed");
    }
    std::vector<float> values(static_cast<size_t>(ggml_nelements(out)));
    ggml_backend_tensor_get(out, values.data(), 0, ggml_nbytes(out));
    return values;
}

bool NodeTrace::eval(ggml_tensor * t, bool ask, void * self) {
    if (ask) {
        return t->type == GGML_TYPE_F32 && t->name[0] != '\0' && !is_layout_op(t->op) && ggml_is_contiguous(t);
    }
    TracedNode node;
    node.name = t->name;
    for (int d = 0; d < 4; ++d) {
        node.ne[d] = t->ne[d];
    }
    node.values.resize(static_cast<size_t>(ggml_nelements(t)));
    ggml_backend_tensor_get(t, node.values.data(), 0, ggml_nbytes(t));
    static_cast<NodeTrace *>(self)->nodes.push_back(std::move(node));
    return true;
}

}  // namespace river
