#include "kv_cache.h"

#include <string>

#include "common.h"
#include "ggml-alloc.h"

namespace river {

namespace {

// K and V alike: F16, n_embd_kv values per position.
constexpr ggml_type k_cache_type = GGML_TYPE_F16;

}  // namespace

size_t KvCache::size_for(const HParams & hp, int64_t n_ctx, int64_t n_seq) {
    return 2 * static_cast<size_t>(hp.n_layer) * ggml_row_size(k_cache_type, hp.n_embd_kv() * n_ctx * n_seq);
}

KvCache::KvCache(const HParams & hp, int64_t n_ctx, int64_t n_seq, ggml_backend_buffer_type_t buft)
    : n_ctx_(n_ctx), n_past_(static_cast<size_t>(n_seq), 0) {
    const int64_t n_cells = n_ctx * n_seq;
    ggml_init_params params{ggml_tensor_overhead() * 2 * static_cast<size_t>(hp.n_layer), nullptr, true};
    ctx_ = ggml_init(params);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        ggml_tensor * k = ggml_new_tensor_2d(ctx_, k_cache_type, hp.n_embd_kv(), n_cells);
        ggml_tensor * v = ggml_new_tensor_2d(ctx_, k_cache_type, n_cells, hp.n_embd_kv());
        ggml_format_name(k, "cache_k-%d", static_cast<int>(il));
        ggml_format_name(v, "cache_v-%d", static_cast<int>(il));
        k_.push_back(k);
        v_.push_back(v);
    }
    buffer_.reset(ggml_backend_alloc_ctx_tensors_from_buft(ctx_, buft));
    if (!buffer_) {
        ggml_free(ctx_);
        throw Error("cannot allocate the KV cache for n_ctx=" + std::to_string(n_ctx) + " x " + std::to_string(n_seq) +
                    " sequences in " + ggml_backend_buft_name(buft));
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

int64_t KvCache::check_seq(int64_t seq, int64_t n_seq) {
    if (seq < 0 || seq >= n_seq) {
        throw Error("sequence " + std::to_string(seq) + " is not in the KV cache (it holds sequences 0 to " +
                    std::to_string(n_seq - 1) + ")");
    }
    return seq;
}

void KvCache::advance(int64_t seq, int64_t n_tokens) {
    int64_t & n_past = n_past_[check_seq(seq, n_seq())];
    if (n_past + n_tokens > n_ctx_) {
        throw Error("KV cache overflow: " + std::to_string(n_past + n_tokens) + " > n_ctx " + std::to_string(n_ctx_));
    }
    n_past += n_tokens;
}

void KvCache::rewind(int64_t seq, int64_t n_past) {
    int64_t & held = n_past_[check_seq(seq, n_seq())];
    if (n_past < 0 || n_past > held) {
        throw Error("cannot rewind the KV cache to " + std::to_string(n_past) + " (it holds " + std::to_string(held) +
                    " positions)");
    }
    held = n_past;
}

size_t KvCache::state_size(int64_t n) const {
    return 2 * k_.size() * ggml_row_size(k_cache_type, k_.empty() ? 0 : k_[0]->ne[0] * n);
}

void KvCache::save(int64_t seq, int64_t n, uint8_t * out) const {
    const int64_t cell = first_cell(seq);
    if (n < 0 || n > n_past(seq)) {
        throw Error("cannot save " + std::to_string(n) + " cache positions (it holds " + std::to_string(n_past(seq)) +
                    ")");
    }
    for (size_t il = 0; il < k_.size(); ++il) {
        const ggml_tensor * k = k_[il];  // [n_embd_kv, n_cells]: the sequence's first n rows are contiguous
        ggml_backend_tensor_get(k, out, cell * k->nb[1], k->nb[1] * n);
        out += k->nb[1] * n;
        const ggml_tensor * v = v_[il];  // [n_cells, n_embd_kv]: n values from the first cell of each row
        const size_t row = ggml_row_size(v->type, n);
        for (int64_t c = 0; c < v->ne[1]; ++c) {
            ggml_backend_tensor_get(v, out, c * v->nb[1] + cell * v->nb[0], row);
            out += row;
        }
    }
}

void KvCache::load(int64_t seq, int64_t n, const uint8_t * data) {
    const int64_t cell = first_cell(seq);
    if (n < 0 || n > n_ctx_) {
        throw Error("cannot load " + std::to_string(n) + " cache positions into a cache of n_ctx " +
                    std::to_string(n_ctx_));
    }
    for (size_t il = 0; il < k_.size(); ++il) {
        ggml_tensor * k = k_[il];  // [n_embd_kv, n_cells]
        ggml_backend_tensor_set(k, data, cell * k->nb[1], k->nb[1] * n);
        data += k->nb[1] * n;
        ggml_tensor * v = v_[il];  // [n_cells, n_embd_kv]
        const size_t row = ggml_row_size(v->type, n);
        for (int64_t c = 0; c < v->ne[1]; ++c) {
            ggml_backend_tensor_set(v, data, c * v->nb[1] + cell * v->nb[0], row);
            data += row;
        }
    }
    n_past_[seq] = n;
}

}  // namespace river
