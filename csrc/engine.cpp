#include "engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common.h"
#include "ggml-cpu.h"

namespace river {

namespace {

constexpr size_t k_max_graph_nodes = 8192;

struct ContextDeleter {
    void operator()(ggml_context * c) const { ggml_free(c); }
};

// Copies host data into a graph input. An input that no node of this graph reads
// (the sliding-window mask of a segment of global layers) was never allocated.
void set_input(ggml_tensor * input, const void * data) {
    if (input && input->buffer) {
        ggml_backend_tensor_set(input, data, 0, ggml_nbytes(input));
    }
}

}  // namespace

// ---------------------------------------------------------------- setup

Engine::Engine(const std::string & model_path, const EngineParams & params) : params_(params) {
    if (params.n_ctx <= 0) {
        throw Error("n_ctx must be positive, got " + std::to_string(params.n_ctx));
    }
    if (params.n_batch <= 0) {
        throw Error("n_batch must be positive, got " + std::to_string(params.n_batch));
    }
    file_ = std::make_unique<GgufFile>(model_path, params.use_mmap);
    hp_ = read_hparams(*file_);
    backbone_ = map_weights(*file_, hp_, weight_buffer_);
    backbone_repacked_.repack(matrix_slots(backbone_.layers, backbone_.output));
    exit_.thresholds.assign(hp_.n_layer, std::numeric_limits<float>::infinity());

    backend_ = ggml_backend_cpu_init();
    if (!backend_) {
        throw Error("cannot initialise the ggml CPU backend");
    }
    set_n_threads(params.n_threads);
    kv_ = std::make_unique<KvCache>(hp_, params.n_ctx, backend_);

    ggml_init_params state_params{ggml_tensor_overhead(), nullptr, true};
    state_ctx_ = ggml_init(state_params);
    state_ = ggml_new_tensor_2d(state_ctx_, GGML_TYPE_F32, hp_.n_embd, params.n_batch);
    ggml_set_name(state_, "residual_state");
    state_buffer_.reset(ggml_backend_alloc_ctx_tensors(state_ctx_, backend_));

    galloc_ = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend_));
    graph_meta_.resize(ggml_tensor_overhead() * k_max_graph_nodes +
                       ggml_graph_overhead_custom(k_max_graph_nodes, false));
    log(LogLevel::info, "loaded " + hp_.arch + " model: " + std::to_string(hp_.n_layer) + " layers, n_embd " +
                            std::to_string(hp_.n_embd) + ", n_vocab " + std::to_string(hp_.n_vocab));
}

Engine::~Engine() {
    ggml_gallocr_free(galloc_);
    state_buffer_.reset();
    ggml_free(state_ctx_);
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

void Engine::load_river(const std::string & river_path) {
    auto file = std::make_unique<GgufFile>(river_path, params_.use_mmap);
    BufferPtr buffer;
    RiverWeights weights = map_river_weights(*file, *file_, hp_, backbone_, buffer);
    auto repacked = std::make_unique<RepackedTensors>();
    repacked->repack(matrix_slots(weights.layers, weights.output));
    river_ = std::move(weights);
    river_repacked_ = std::move(repacked);
    river_buffer_ = std::move(buffer);
    river_file_ = std::move(file);
}

void Engine::check_files() const {
    file_->check_unchanged();
    if (river_file_) {
        river_file_->check_unchanged();
    }
}

void Engine::set_exit(const ExitConfig & config) {
    if (static_cast<int64_t>(config.thresholds.size()) != hp_.n_layer) {
        throw Error("exit thresholds need one value per layer (" + std::to_string(hp_.n_layer) + "), got " +
                    std::to_string(config.thresholds.size()));
    }
    if (config.tail_layers < 0 || config.tail_layers > hp_.n_layer) {
        throw Error("tail_layers must be in [0, " + std::to_string(hp_.n_layer) + "], got " +
                    std::to_string(config.tail_layers));
    }
    for (float t : config.thresholds) {
        if (std::isnan(t)) {
            throw Error("exit thresholds must not be NaN");
        }
    }
    exit_ = config;
}

// ---------------------------------------------------------------- forward

void Engine::forward(const int32_t * ids, int64_t n_ids, bool last_only, bool use_exit, float * logits) {
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
    check_files();
    last_exit_layers_.clear();
    const int64_t n_past_before = n_past();
    try {
        for (int64_t start = 0; start < n_ids; start += params_.n_batch) {
            const int64_t n = std::min(params_.n_batch, n_ids - start);
            const bool is_last = start + n == n_ids;
            float * out = nullptr;
            if (!last_only) {
                out = logits + start * hp_.n_vocab;
            } else if (is_last) {
                out = logits;
            }
            const int64_t depth = forward_batch(ids + start, n, last_only, use_exit, out);
            last_exit_layers_.insert(last_exit_layers_.end(), n, static_cast<int32_t>(depth));
        }
    } catch (...) {
        kv_->rewind(n_past_before);
        throw;
    }
}

void Engine::check_logits(const float * logits, int64_t n_rows, int64_t exit_depth) const {
    const int64_t n_vocab = hp_.n_vocab;
    for (int64_t row = 0; row < n_rows; ++row) {
        // an exponent of all ones is Inf or NaN; integer tests vectorize where isfinite's branch would not
        const float * values = logits + row * n_vocab;
        uint32_t bad = 0;
        for (int64_t i = 0; i < n_vocab; ++i) {
            uint32_t bits;
            std::memcpy(&bits, values + i, sizeof(bits));
            bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
        }
        if (!bad) {
            continue;
        }
        std::string weights;
        if (exit_depth >= hp_.n_layer) {
            weights = "the backbone weights (" + file_->path() + ")";
        } else {
            weights = "the river weights (" + river_file_->path() + ", after " + std::to_string(exit_depth) +
                      " backbone layers" + (exit_.river_head ? ", with the river's LM head" : "") + ")";
        }
        throw Error("non-finite logits (NaN or Inf) at row " + std::to_string(row) + " of the batch, computed with " +
                    weights + ": the file is damaged or its values overflow; the sequence is left as it was");
    }
}

// Sequence-level exit: the whole batch leaves at the first checked depth where the
// least similar token passes. Returns the exit depth (n_layer: never left).
int64_t Engine::forward_batch(const int32_t * ids, int64_t n_tokens, bool last_only, bool use_exit, float * logits) {
    const int64_t n_layer = hp_.n_layer;
    // Exiting at or after this depth would run no river layer at all.
    const int64_t depth_limit = has_river() && use_exit ? n_layer - exit_.tail_layers : 0;
    auto next_check = [&](int64_t after) {
        for (int64_t d = after + 1; d < depth_limit; ++d) {
            if (std::isfinite(exit_.thresholds[d]) || exit_.thresholds[d] < 0) {
                return d;
            }
        }
        return n_layer;
    };

    BatchData batch{ids, std::vector<int32_t>(n_tokens), {}};
    const int64_t n_past = kv_->n_past(), n_kv = n_past + n_tokens;
    const float masked = -std::numeric_limits<float>::infinity();
    batch.kq_mask.resize(n_kv * n_tokens);
    for (int64_t i = 0; i < n_tokens; ++i) {
        batch.positions[i] = static_cast<int32_t>(n_past + i);
        // token i (position n_past + i) sees cache positions 0 .. n_past + i
        for (int64_t j = 0; j < n_kv; ++j) {
            batch.kq_mask[i * n_kv + j] = j <= n_past + i ? 0.0f : masked;
        }
    }
    if (hp_.has_swa()) {
        // and in sliding-window layers only the last n_swa of them, itself included
        batch.kq_mask_swa = batch.kq_mask;
        for (int64_t i = 0; i < n_tokens; ++i) {
            for (int64_t j = 0; j <= n_past + i - hp_.n_swa; ++j) {
                batch.kq_mask_swa[i * n_kv + j] = masked;
            }
        }
    }

    int64_t done = 0;   // backbone layers this batch has run
    last_similarities_.assign(n_layer, std::numeric_limits<float>::quiet_NaN());
    if (depth_limit > 0 && exit_.thresholds[0] < 1.0f) {
        run_segment({0, n_layer, 0, false}, batch, last_only, logits);
        return 0;
    }
    for (int64_t check = next_check(0); check < n_layer; check = next_check(check)) {
        const float similarity = run_segment({done, check, n_layer, true}, batch, false, nullptr);
        done = check;
        last_similarities_[check] = similarity;
        if (similarity > exit_.thresholds[check]) {
            run_segment({done, n_layer, done, false}, batch, last_only, logits);
            return done;
        }
    }
    run_segment({done, n_layer, n_layer, false}, batch, last_only, logits);
    return n_layer;
}

const LayerWeights & Engine::layer_weights(int64_t il, int64_t exit_depth) const {
    const bool on_river = il >= exit_depth && il < hp_.n_layer - exit_.tail_layers;
    return on_river ? river_.layers[il] : backbone_.layers[il];
}

ggml_tensor * Engine::head_weights(int64_t exit_depth) const {
    return exit_depth < hp_.n_layer && exit_.river_head ? river_.output : backbone_.output;
}

ggml_tensor * Engine::state_view(ggml_context * ctx, int64_t n_tokens) const {
    return ggml_view_2d(ctx, state_, hp_.n_embd, n_tokens, state_->nb[1], 0);
}

float Engine::run_segment(const Segment & seg, const BatchData & batch, bool last_only, float * logits) {
    const int64_t n_tokens = batch.n_tokens(), n_past = kv_->n_past(), n_kv = n_past + n_tokens;
    const bool has_head = seg.end_layer == hp_.n_layer;

    ggml_init_params params{graph_meta_.size(), graph_meta_.data(), true};
    std::unique_ptr<ggml_context, ContextDeleter> owner(ggml_init(params));
    ggml_context * ctx = owner.get();
    ggml_cgraph * gf = ggml_new_graph_custom(ctx, k_max_graph_nodes, false);

    BatchInputs in;
    in.n_tokens = n_tokens;
    in.n_past = n_past;
    in.positions = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_tokens);
    in.kq_mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_kv, n_tokens);
    ggml_set_input(in.positions);
    ggml_set_input(in.kq_mask);
    if (hp_.has_swa()) {
        in.kq_mask_swa = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_kv, n_tokens);
        ggml_set_input(in.kq_mask_swa);
    }
    GraphContext g{ctx, gf, hp_, *kv_, in, backbone_.rope_freqs};

    // [n_embd, n_tokens]
    ggml_tensor * tokens = nullptr;
    ggml_tensor * inpL = nullptr;
    if (seg.first_layer == 0) {
        tokens = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_tokens);
        ggml_set_input(tokens);
        inpL = ggml_get_rows(ctx, backbone_.tok_embd, tokens);
        if (hp_.embd_scale != 1.0f) {
            inpL = ggml_scale(ctx, inpL, hp_.embd_scale);
        }
    } else {
        inpL = state_view(ctx, n_tokens);
    }
    ggml_tensor * block_input = inpL;
    for (int64_t il = seg.first_layer; il < seg.end_layer; ++il) {
        block_input = inpL;
        inpL = build_layer(g, layer_weights(il, seg.exit_depth), il, inpL);
    }

    ggml_tensor * similarity = nullptr;
    if (seg.similarity) {
        similarity = build_state_similarity(ctx, exit_.signal, block_input, inpL);
        ggml_set_output(similarity);
        ggml_build_forward_expand(gf, similarity);
    }
    ggml_tensor * result = nullptr;
    if (has_head) {
        if (last_only) {
            // [n_embd, 1]: only the last position needs the (large) head
            inpL = ggml_view_2d(ctx, inpL, hp_.n_embd, 1, inpL->nb[1], inpL->nb[1] * (n_tokens - 1));
        }
        result = build_head(g, backbone_.output_norm, head_weights(seg.exit_depth), inpL);
        ggml_set_output(result);
        ggml_build_forward_expand(gf, result);
    } else {
        ggml_build_forward_expand(gf, ggml_cpy(ctx, inpL, state_view(ctx, n_tokens)));
    }

    if (!ggml_gallocr_alloc_graph(galloc_, gf)) {
        throw Error("cannot allocate the compute graph");
    }
    set_input(tokens, batch.ids);
    set_input(in.positions, batch.positions.data());
    set_input(in.kq_mask, batch.kq_mask.data());
    set_input(in.kq_mask_swa, batch.kq_mask_swa.data());

    if (ggml_backend_graph_compute(backend_, gf) != GGML_STATUS_SUCCESS) {
        throw Error("graph computation failed");
    }
    if (has_head) {
        kv_->advance(n_tokens);
        if (logits) {
            ggml_backend_tensor_get(result, logits, 0, ggml_nbytes(result));
            check_logits(logits, last_only ? 1 : n_tokens, seg.exit_depth);
        }
    }
    float min_similarity = std::numeric_limits<float>::infinity();
    if (similarity) {
        std::vector<float> values(n_tokens);
        ggml_backend_tensor_get(similarity, values.data(), 0, ggml_nbytes(similarity));
        min_similarity = *std::min_element(values.begin(), values.end());
    }
    return min_similarity;
}

void Engine::read_kv(int64_t il, int64_t pos, int64_t n, float * k_out, float * v_out) const {
    if (il < 0 || il >= hp_.n_layer || pos < 0 || n < 0 || pos + n > kv_->n_past()) {
        throw Error("read_kv: layer " + std::to_string(il) + " positions [" + std::to_string(pos) + ", " +
                    std::to_string(pos + n) + ") are not in the cache");
    }
    const int64_t n_embd_kv = hp_.n_embd_kv();
    std::vector<ggml_fp16_t> row(n_embd_kv);
    for (int64_t p = pos; p < pos + n; ++p) {
        const ggml_tensor * k = kv_->k(il);
        ggml_backend_tensor_get(k, row.data(), p * k->nb[1], sizeof(ggml_fp16_t) * n_embd_kv);
        ggml_fp16_to_fp32_row(row.data(), k_out + (p - pos) * n_embd_kv, n_embd_kv);
        const ggml_tensor * v = kv_->v(il);
        for (int64_t c = 0; c < n_embd_kv; ++c) {
            ggml_fp16_t value;
            ggml_backend_tensor_get(v, &value, c * v->nb[1] + p * sizeof(ggml_fp16_t), sizeof(value));
            v_out[(p - pos) * n_embd_kv + c] = ggml_fp16_to_fp32(value);
        }
    }
}

}  // namespace river
