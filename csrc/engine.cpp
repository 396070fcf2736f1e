#include "engine.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common.h"
#include "ggml-cpu.h"
#include "graph.h"

namespace river {

namespace {

constexpr size_t k_max_graph_nodes = 8192;

struct ContextDeleter {
    void operator()(ggml_context * c) const { ggml_free(c); }
};

}  // namespace

Engine::Engine(const std::string & model_path, const EngineParams & params) : params_(params) {
    if (params.n_ctx <= 0) {
        throw Error("n_ctx must be positive, got " + std::to_string(params.n_ctx));
    }
    if (params.n_batch <= 0) {
        throw Error("n_batch must be positive, got " + std::to_string(params.n_batch));
    }
    file_ = std::make_unique<GgufFile>(model_path);
    hp_ = read_hparams(*file_);
    backbone_ = map_weights(*file_, hp_, weight_buffer_);

    backend_ = ggml_backend_cpu_init();
    if (!backend_) {
        throw Error("cannot initialise the ggml CPU backend");
    }
    set_n_threads(params.n_threads);
    kv_ = std::make_unique<KvCache>(hp_, params.n_ctx, backend_);
    galloc_ = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend_));
    graph_meta_.resize(ggml_tensor_overhead() * k_max_graph_nodes + ggml_graph_overhead_custom(k_max_graph_nodes, false));
    log(LogLevel::info, "loaded " + hp_.arch + " model: " + std::to_string(hp_.n_layer) + " layers, n_embd " +
                            std::to_string(hp_.n_embd) + ", n_vocab " + std::to_string(hp_.n_vocab));
}

Engine::~Engine() {
    ggml_gallocr_free(galloc_);
    kv_.reset();
    ggml_backend_free(backend_);
}

void Engine::set_n_threads(int n_threads) {
    if (n_threads <= 0) {
        throw Error("n_threads must be positive, got " + std::to_string(n_threads));
    }
    n_threads_ = n_threads;
    ggml_backend_cpu_set_n_threads(backend_, n_threads);
}

void Engine::forward(const int32_t * ids, int64_t n_ids, bool last_only, float * logits) {
    if (n_ids <= 0) {
        throw Error("forward needs at least one token");
    }
    if (n_past() + n_ids > n_ctx()) {
        throw Error("context overflow: " + std::to_string(n_past()) + " cached + " + std::to_string(n_ids) +
                    " new tokens exceed n_ctx = " + std::to_string(n_ctx()));
    }
    for (int64_t i = 0; i < n_ids; ++i) {
        if (ids[i] < 0 || ids[i] >= hp_.n_vocab) {
            throw Error("token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                        " is outside the vocabulary [0, " + std::to_string(hp_.n_vocab) + ")");
        }
    }
    for (int64_t start = 0; start < n_ids; start += params_.n_batch) {
        const int64_t n = std::min(params_.n_batch, n_ids - start);
        const bool is_last = start + n == n_ids;
        if (last_only && !is_last) {
            forward_batch(ids + start, n, true, nullptr);
        } else {
            forward_batch(ids + start, n, last_only, last_only ? logits : logits + start * hp_.n_vocab);
        }
    }
}

ggml_cgraph * Engine::build_segment(ggml_context * ctx, const Segment & seg, const BatchInputs & in,
                                    bool last_only, ggml_tensor ** result) {
    ggml_cgraph * gf = ggml_new_graph_custom(ctx, k_max_graph_nodes, false);
    GraphContext g{ctx, gf, hp_, *kv_, in, backbone_.rope_freqs};

    // [n_embd, n_tokens]
    ggml_tensor * inpL = ggml_get_rows(ctx, backbone_.tok_embd, in.tokens);
    for (int64_t il = seg.first_layer; il < seg.end_layer; ++il) {
        inpL = build_layer(g, backbone_.layers[il], il, inpL);
    }
    if (last_only) {
        // [n_embd, 1]: only the last position needs the (large) head
        inpL = ggml_view_2d(ctx, inpL, hp_.n_embd, 1, inpL->nb[1], inpL->nb[1] * (in.n_tokens - 1));
    }
    ggml_tensor * logits = build_head(g, backbone_.output_norm, backbone_.output, inpL);
    ggml_set_output(logits);
    ggml_build_forward_expand(gf, logits);
    *result = logits;
    return gf;
}

void Engine::forward_batch(const int32_t * ids, int64_t n_tokens, bool last_only, float * logits) {
    const int64_t n_past = kv_->n_past(), n_kv = n_past + n_tokens;

    ggml_init_params params{graph_meta_.size(), graph_meta_.data(), true};
    std::unique_ptr<ggml_context, ContextDeleter> ctx(ggml_init(params));

    BatchInputs in;
    in.n_tokens = n_tokens;
    in.n_past = n_past;
    in.tokens = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_I32, n_tokens);
    in.positions = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_I32, n_tokens);
    in.kq_mask = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, n_kv, n_tokens);
    for (ggml_tensor * t : {in.tokens, in.positions, in.kq_mask}) {
        ggml_set_input(t);
    }

    ggml_tensor * result = nullptr;
    ggml_cgraph * gf = build_segment(ctx.get(), Segment{0, hp_.n_layer}, in, last_only, &result);
    if (!ggml_gallocr_alloc_graph(galloc_, gf)) {
        throw Error("cannot allocate the compute graph");
    }

    std::vector<int32_t> positions(n_tokens);
    for (int64_t i = 0; i < n_tokens; ++i) {
        positions[i] = static_cast<int32_t>(n_past + i);
    }
    // token i (position n_past + i) sees cache positions 0 .. n_past + i
    std::vector<float> mask(n_kv * n_tokens);
    for (int64_t i = 0; i < n_tokens; ++i) {
        for (int64_t j = 0; j < n_kv; ++j) {
            mask[i * n_kv + j] = j <= n_past + i ? 0.0f : -std::numeric_limits<float>::infinity();
        }
    }
    ggml_backend_tensor_set(in.tokens, ids, 0, ggml_nbytes(in.tokens));
    ggml_backend_tensor_set(in.positions, positions.data(), 0, ggml_nbytes(in.positions));
    ggml_backend_tensor_set(in.kq_mask, mask.data(), 0, ggml_nbytes(in.kq_mask));

    if (ggml_backend_graph_compute(backend_, gf) != GGML_STATUS_SUCCESS) {
        throw Error("graph computation failed");
    }
    kv_->advance(n_tokens);
    if (logits) {
        ggml_backend_tensor_get(result, logits, 0, ggml_nbytes(result));
    }
}

}  // namespace river
