#include "kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common.h"
#include "ggml-alloc.h"

namespace river {

namespace {

// What a saved state opens with: its cache's types, so that it never loads into a cache
// of others (whose rows may even have the same bytes).
struct StateHeader {
    char magic[4];
    int32_t type_k;
    int32_t type_v;
};
constexpr char k_state_magic[4] = {'R', 'V', 'K', 'V'};

}  // namespace

ggml_type kv_cache_type(const std::string & option, const std::string & name, int64_t head) {
    for (ggml_type type : {GGML_TYPE_F16, GGML_TYPE_Q8_0}) {
        if (name != ggml_type_name(type)) {
            continue;
        }
        if (head % ggml_blck_size(type) != 0) {
            throw Error(option + "=" + name + ": a KV cache of " + name + " stores blocks of " +
                        std::to_string(ggml_blck_size(type)) + " values, which do not tile this model's heads of " +
                        std::to_string(head));
        }
        return type;
    }
    throw Error(option + ": a KV cache stores K and V as f16 or q8_0, not '" + name + "'");
}

size_t KvCache::size_for(const HParams & hp, int64_t n_ctx, int64_t n_seq, ggml_type type_k, ggml_type type_v) {
    const size_t n_cells = static_cast<size_t>(n_ctx * n_seq);
    return static_cast<size_t>(hp.n_layer) * n_cells *
           (ggml_row_size(type_k, hp.n_embd_kv()) + ggml_row_size(type_v, hp.n_embd_kv()));
}

KvCache::KvCache(const HParams & hp, int64_t n_ctx, int64_t n_seq, ggml_backend_buffer_type_t buft, ggml_type type_k,
                 ggml_type type_v)
    : n_ctx_(n_ctx), type_k_(type_k), type_v_(type_v), n_past_(static_cast<size_t>(n_seq), 0) {
    const int64_t n_cells = n_ctx * n_seq;
    ggml_init_params params{ggml_tensor_overhead() * 2 * static_cast<size_t>(hp.n_layer), nullptr, true};
    ctx_ = ggml_init(params);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        ggml_tensor * k = ggml_new_tensor_2d(ctx_, type_k, hp.n_embd_kv(), n_cells);
        ggml_tensor * v = v_transposed() ? ggml_new_tensor_2d(ctx_, type_v, n_cells, hp.n_embd_kv())
                                         : ggml_new_tensor_2d(ctx_, type_v, hp.n_embd_kv(), n_cells);
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

void KvCache::read(int64_t seq, int64_t il, int64_t pos, int64_t n, float * k_out, float * v_out) const {
    const int64_t first = first_cell(seq), n_embd_kv = k_[il]->ne[0];
    const ggml_tensor * k = k_[il];
    const ggml_tensor * v = v_[il];
    std::vector<uint8_t> row(std::max(k->nb[1], v->nb[1]));
    for (int64_t p = pos; p < pos + n; ++p) {
        const int64_t cell = first + p;
        ggml_backend_tensor_get(k, row.data(), cell * k->nb[1], k->nb[1]);
        ggml_get_type_traits(k->type)->to_float(row.data(), k_out + (p - pos) * n_embd_kv, n_embd_kv);
        if (!v_transposed()) {
            ggml_backend_tensor_get(v, row.data(), cell * v->nb[1], v->nb[1]);
            ggml_get_type_traits(v->type)->to_float(row.data(), v_out + (p - pos) * n_embd_kv, n_embd_kv);
            continue;
        }
        for (int64_t c = 0; c < n_embd_kv; ++c) {
            ggml_fp16_t value;
            ggml_backend_tensor_get(v, &value, c * v->nb[1] + cell * v->nb[0], sizeof(value));
            v_out[(p - pos) * n_embd_kv + c] = ggml_fp16_to_fp32(value);
        }
    }
}

size_t KvCache::state_size(int64_t n) const {
    const int64_t n_embd_kv = k_.empty() ? 0 : k_[0]->ne[0];
    return sizeof(StateHeader) +
           k_.size() * static_cast<size_t>(n) * (ggml_row_size(type_k_, n_embd_kv) + ggml_row_size(type_v_, n_embd_kv));
}

std::vector<KvCache::Run> KvCache::runs(int64_t seq, int64_t n) const {
    const int64_t cell = first_cell(seq);
    std::vector<Run> out;
    for (size_t il = 0; il < k_.size(); ++il) {
        // [n_embd_kv, n_cells]: the sequence's first n rows are contiguous
        out.push_back({k_[il], cell * k_[il]->nb[1], k_[il]->nb[1] * n});
        ggml_tensor * v = v_[il];
        if (!v_transposed()) {
            out.push_back({v, cell * v->nb[1], v->nb[1] * n});
            continue;
        }
        // [n_cells, n_embd_kv]: n values from the first cell of each row
        for (int64_t c = 0; c < v->ne[1]; ++c) {
            out.push_back({v, c * v->nb[1] + cell * v->nb[0], ggml_row_size(v->type, n)});
        }
    }
    return out;
}

void KvCache::save(int64_t seq, int64_t n, uint8_t * out) const {
    if (n < 0 || n > n_past(seq)) {
        throw Error("cannot save " + std::to_string(n) + " cache positions (it holds " + std::to_string(n_past(seq)) +
                    ")");
    }
    StateHeader header{{}, static_cast<int32_t>(type_k_), static_cast<int32_t>(type_v_)};
    std::memcpy(header.magic, k_state_magic, sizeof(header.magic));
    std::memcpy(out, &header, sizeof(header));
    out += sizeof(header);
    for (const Run & run : runs(seq, n)) {
        ggml_backend_tensor_get(run.tensor, out, run.offset, run.size);
        out += run.size;
    }
}

void KvCache::load(int64_t seq, int64_t n, const uint8_t * data, size_t size) {
    check_seq(seq, n_seq());
    if (n < 0 || n > n_ctx_) {
        throw Error("cannot load " + std::to_string(n) + " cache positions into a cache of n_ctx " +
                    std::to_string(n_ctx_));
    }
    StateHeader header;
    if (size >= sizeof(header)) {
        std::memcpy(&header, data, sizeof(header));
    }
    if (size < sizeof(header) || std::memcmp(header.magic, k_state_magic, sizeof(header.magic)) != 0) {
        throw Error("these " + std::to_string(size) + " bytes are not a KV cache state that save_kv wrote");
    }
    data += sizeof(header);
    if (header.type_k != type_k_ || header.type_v != type_v_) {
        const auto name = [](int32_t type) {
            return type >= 0 && type < GGML_TYPE_COUNT ? ggml_type_name(static_cast<ggml_type>(type)) : "unknown";
        };
        throw Error(std::string("a KV cache state saved with type_k=") + name(header.type_k) +
                    ", type_v=" + name(header.type_v) + " cannot load into a cache of type_k=" + name(type_k_) +
                    ", type_v=" + name(type_v_));
    }
    if (size != state_size(n)) {
        throw Error(std::to_string(size) + " bytes are not the state of " + std::to_string(n) +
                    " positions of this model's cache (" + std::to_string(state_size(n)) + " bytes)");
    }
    for (const Run & run : runs(seq, n)) {
        ggml_backend_tensor_set(run.tensor, data, run.offset, run.size);
        data += run.size;
    }
    n_past_[seq] = n;
}

}  // namespace river
