#include "buft_probe.h"

#include <memory>

#include "common.h"
#include "cpu_layout.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml_ptr.h"
#include "offload.h"
#include "weights.h"

namespace river {

namespace {

// inputs x weights^T, with the weights (already quantized) in a buffer of `weight_buft`
std::vector<float> multiply(ggml_backend_t cpu, ggml_backend_buffer_type_t weight_buft, ggml_type type,
                            const std::vector<uint8_t> & quantized, int64_t n_out, int64_t n_in, const float * inputs,
                            int64_t n_tokens) {
    ContextPtr weight_ctx = new_metadata_context(1);
    ggml_tensor * w = ggml_new_tensor_2d(weight_ctx.get(), type, n_in, n_out);
    BufferPtr weight_buffer(ggml_backend_alloc_ctx_tensors_from_buft(weight_ctx.get(), weight_buft));
    if (!weight_buffer) {
        throw Error(std::string("cannot allocate a probe matrix in ") + ggml_backend_buft_name(weight_buft));
    }
    ggml_backend_buffer_set_usage(weight_buffer.get(), GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    // an extra buffer type's set_tensor converts the rows into its own layout
    ggml_backend_tensor_set(w, quantized.data(), 0, quantized.size());

    ContextPtr ctx = new_metadata_context(2);
    ggml_tensor * x = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, n_in, n_tokens);
    ggml_tensor * y = ggml_mul_mat(ctx.get(), w, x);
    ggml_cgraph * graph = ggml_new_graph(ctx.get());
    ggml_build_forward_expand(graph, y);
    BufferPtr buffer(ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), ggml_backend_cpu_buffer_type()));
    if (!buffer) {
        throw Error("cannot allocate the probe's activations");
    }
    ggml_backend_tensor_set(x, inputs, 0, ggml_nbytes(x));
    if (ggml_backend_graph_compute(cpu, graph) != GGML_STATUS_SUCCESS) {
        throw Error(std::string("the probe's product through ") + ggml_backend_buft_name(weight_buft) + " failed");
    }
    std::vector<float> out(static_cast<size_t>(n_out * n_tokens));
    ggml_backend_tensor_get(y, out.data(), 0, ggml_nbytes(y));
    return out;
}

}  // namespace

ProbeProduct probe_matmul(const std::string & buft_name, ggml_type type, const float * weights, int64_t n_out,
                          int64_t n_in, const float * inputs, int64_t n_tokens, int n_threads) {
    ggml_backend_buffer_type_t extra = cpu_extra_buffer_type(buft_name);
    if (n_out <= 0 || n_tokens <= 0 || n_in <= 0 || n_in % ggml_blck_size(type) != 0) {
        throw Error(std::string("a probe needs rows whose length is a positive multiple of ") +
                    std::to_string(ggml_blck_size(type)) + " for " + ggml_type_name(type));
    }
    ProbeProduct result;
    ggml_backend_dev_t cpu_dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!cpu_dev) {
        throw Error("this ggml has no CPU device");
    }
    {
        ContextPtr ctx = new_metadata_context(1);
        const ggml_tensor * shape = ggml_new_tensor_2d(ctx.get(), type, n_in, n_out);
        if (!device_multiplies(cpu_dev, extra, shape)) {
            return result;
        }
    }
    result.supported = true;
    BackendPtr cpu(ggml_backend_dev_init(cpu_dev, nullptr));
    if (!cpu) {
        throw Error("cannot initialise the ggml CPU backend");
    }
    ggml_backend_cpu_set_n_threads(cpu.get(), n_threads);
    std::vector<uint8_t> quantized(ggml_row_size(type, n_in) * static_cast<size_t>(n_out));
    ggml_quantize_chunk(type, weights, quantized.data(), 0, n_out, n_in, nullptr);
    result.plain = multiply(cpu.get(), ggml_backend_cpu_buffer_type(), type, quantized, n_out, n_in, inputs, n_tokens);
    result.extra = multiply(cpu.get(), extra, type, quantized, n_out, n_in, inputs, n_tokens);
    return result;
}

}  // namespace river
