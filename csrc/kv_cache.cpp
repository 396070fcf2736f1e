#include "kv_cache.h"

#include <string>

#include "common.h"
#include "ggml-alloc.h"

namespace river {

namespace {

// K and V alike: F16, n_embd_kv values per position.
constexpr ggml_type k_cache_type = GGML_TYPE_F16;

}  // namespace

size_t KvCache::size_for(const HParams & hp, int64_t n_ctx) {
    return 2 * static_cast<size_t>(hp.n_layer) * ggml_row_size(k_cache_type, hp.n_embd_kv() * n_ctx);
}

KvCache::KvCache(const HParams & hp, int64_t n_ctx, ggml_backend_buffer_type_t buft) : n_ctx_(n_ctx) {
    ggml_init_params params{ggml_tensor_overhead() * 2 * static_cast<size_t>(hp.n_layer), nullptr, true};
    ctx_ = ggml_init(params);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        ggml_tensor * k = ggml_new_tensor_2d(ctx_, k_cache_type, hp.n_embd_kv(), n_ctx);
        ggml_tensor * v = ggml_new_tensor_2d(ctx_, k_cache_type, n_ctx, hp.n_embd_kv());
        ggml_format_name(k, "cache_k-%d", static_cast<int>(il));
        ggml_format_name(v, "cache_v-%d", static_cast<int>(il));
        k_.push_back(k);
        v_.push_back(v);
    }
    buffer_.reset(ggml_backend_alloc_ctx_tensors_from_buft(ctx_, buft));
    if (!buffer_) {
        ggml_free(ctx_);
        throw Error("cannot allocate the KV cache for n_ctx=" + std::to_string(n_ctx) + " in " +
                    ggml_backend_buft_name(buft));
    }
    // Unwritten slots are masked out, but zeros keep them finite: 0 * NaN in the
    // V product would otherwise leak garbage into valid rows.
    ggml_backend_buffer_clear(buffer_.get(), 0);
}

KvCache::~KvCache() {
    buffer_.reset();
    ggml_free(ctx_);
}

size_t KvCache::n_bytes() const {
    return ggml_backend_buffer_get_size(buffer_.get());
}

void KvCache::advance(int64_t n_tokens) {
    if (n_past_ + n_tokens > n_ctx_) {
        throw Error("KV cache overflow: " + std::to_string(n_past_ + n_tokens) + " > n_ctx " + std::to_string(n_ctx_));
    }
    n_past_ += n_tokens;
}

void KvCache::rewind(int64_t n_past) {
    if (n_past < 0 || n_past > n_past_) {
        throw Error("cannot rewind the KV cache to " + std::to_string(n_past) + " (it holds " +
                    std::to_string(n_past_) + " positions)");
    }
    n_past_ = n_past;
}

}  // namespace river
