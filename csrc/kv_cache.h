// The KV cache of n_seq sequences: one K and one V tensor per layer (F16, or q8_0 blocks
// of 32 values with one F16 scale: type_k / type_v), each sequence in its own n_ctx cells (sequence s holds cells [s *
// n_ctx, (s + 1) * n_ctx), its position p in cell s * n_ctx + p). A sequence's cells are laid out as a cache of one
// sequence would lay them out, so attention over them computes what it computes alone. Owned by the engine, not by a
// weight set: whichever weights compute layer l for a token write that token's cell, so backbone and river share one
// cache. Knows nothing of graphs beyond handing out the per-layer tensors.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "hparams.h"
#include "weights.h"

namespace river {

// The types a cache may store K or V in, by ggml name: "f16" and "q8_0". Throws, naming
// `option` (type_k, type_v), for any other name or a type whose blocks do not tile a
// head of `head` values.
ggml_type kv_cache_type(const std::string & option, const std::string & name, int64_t head);

class KvCache {
public:
    // In a buffer of type `buft`: the memory of the device that holds the cache. K and V
    // of the types kv_cache_type names.
    KvCache(const HParams & hp, int64_t n_ctx, int64_t n_seq, ggml_backend_buffer_type_t buft, ggml_type type_k,
            ggml_type type_v);
    ~KvCache();
    KvCache(const KvCache &) = delete;
    KvCache & operator=(const KvCache &) = delete;

    // The bytes a cache of n_seq sequences of n_ctx positions holds, before it is
    // allocated (for placement).
    static size_t size_for(const HParams & hp, int64_t n_ctx, int64_t n_seq, ggml_type type_k, ggml_type type_v);
    // Whether V of this type is stored transposed (F16, as ggml's attention multiplies it)
    // or, quantized, a row per cell as K is: a block of 32 values spans one position's
    // channels, never 32 positions, so that each position is written alone.
    static bool v_transposed(ggml_type type_v) { return type_v == GGML_TYPE_F16; }
    bool v_transposed() const { return v_transposed(type_v_); }
    ggml_type type_k() const { return type_k_; }
    ggml_type type_v() const { return type_v_; }

    int64_t n_ctx() const { return n_ctx_; }
    int64_t n_seq() const { return static_cast<int64_t>(n_past_.size()); }
    int64_t n_cells() const { return n_ctx_ * n_seq(); }
    // Throws unless seq is one of n_seq sequences (0 .. n_seq - 1); returns it.
    static int64_t check_seq(int64_t seq, int64_t n_seq);
    // The cell of sequence seq's position 0; throws for a sequence it does not hold.
    int64_t first_cell(int64_t seq) const { return check_seq(seq, n_seq()) * n_ctx_; }
    int64_t n_past(int64_t seq) const { return n_past_[check_seq(seq, n_seq())]; }
    size_t n_bytes() const;

    // K of layer il, row per cell:                [n_embd_kv, n_cells]
    ggml_tensor * k(int64_t il) const { return k_[il]; }
    // V of layer il: F16 transposed, row per dim, [n_cells, n_embd_kv]; quantized, row
    // per cell as K, [n_embd_kv, n_cells] (see v_transposed)
    ggml_tensor * v(int64_t il) const { return v_[il]; }

    // A sequence's positions [0, n_past) hold valid entries; later cells are
    // overwritten by its next forward pass, so shrinking n_past is all a rewind needs.
    void advance(int64_t seq, int64_t n_tokens);
    void rewind(int64_t seq, int64_t n_past);

    // Positions [pos, pos + n) of sequence seq's layer il as float32 rows of n_embd_kv
    // (the stored values, dequantized): for tests and inspection.
    void read(int64_t seq, int64_t il, int64_t pos, int64_t n, float * k_out, float * v_out) const;

    // A sequence's positions [0, n) of every layer as bytes, and back (a prompt
    // cache's state): a header naming the cache's types, then per layer K's n rows and
    // V's n rows (transposed V: its n_embd_kv rows of n values), as stored. state_size(n)
    // is what save writes and load reads (`size` bytes at data); load makes n the
    // sequence's n_past, and throws for a state of other types or sizes.
    size_t state_size(int64_t n) const;
    void save(int64_t seq, int64_t n, uint8_t * out) const;
    void load(int64_t seq, int64_t n, const uint8_t * data, size_t size);

    // The destructor will leak the cache's memory if it lives on one of `lost`
    // (see forsake_if_lost).
    void forsake_if_lost(const std::set<ggml_backend_dev_t> & lost) { river::forsake_if_lost(buffer_, lost); }

private:
    // A contiguous run of bytes of a state: `size` bytes of `tensor` from `offset`.
    struct Run {
        ggml_tensor * tensor;
        size_t offset;
        size_t size;
    };
    // The runs of sequence seq's first n positions, in the order a state holds them.
    std::vector<Run> runs(int64_t seq, int64_t n) const;

    int64_t n_ctx_;
    ggml_type type_k_, type_v_;
    std::vector<int64_t> n_past_;   // per sequence
    ggml_context * ctx_ = nullptr;
    BufferPtr buffer_;
    std::vector<ggml_tensor *> k_;
    std::vector<ggml_tensor *> v_;
};

}  // namespace river
