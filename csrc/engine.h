// The forward loop: batches of tokens through embedding, blocks and head, on one
// backend, against one KV cache. Owns the backbone file and weights, the cache and
// the graph allocator; does not sample, tokenize or decide policy (Python does).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "gguf_file.h"
#include "graph.h"
#include "hparams.h"
#include "kv_cache.h"
#include "weights.h"

namespace river {

struct EngineParams {
    int64_t n_ctx = 2048;
    int64_t n_batch = 512;   // most positions one graph processes; longer inputs are split
    int n_threads = 1;
};

class Engine {
public:
    Engine(const std::string & model_path, const EngineParams & params);
    ~Engine();
    Engine(const Engine &) = delete;
    Engine & operator=(const Engine &) = delete;

    const HParams & hparams() const { return hp_; }
    int64_t n_ctx() const { return kv_->n_ctx(); }
    int64_t n_past() const { return kv_->n_past(); }
    int n_threads() const { return n_threads_; }
    void set_n_threads(int n_threads);

    // Appends `ids` to the sequence. Writes float32 logits to `logits`: one row of
    // n_vocab per position, or only the last position's row when last_only.
    void forward(const int32_t * ids, int64_t n_ids, bool last_only, float * logits);

    void rewind(int64_t n_past) { kv_->rewind(n_past); }
    void reset() { kv_->rewind(0); }

private:
    // A run of consecutive layers computed by one graph.
    struct Segment {
        int64_t first_layer;
        int64_t end_layer;
    };

    void forward_batch(const int32_t * ids, int64_t n_tokens, bool last_only, float * logits);
    ggml_cgraph * build_segment(ggml_context * ctx, const Segment & seg, const BatchInputs & in, bool last_only,
                                ggml_tensor ** result);

    std::unique_ptr<GgufFile> file_;
    HParams hp_;
    BufferPtr weight_buffer_;
    ModelWeights backbone_;

    EngineParams params_;
    int n_threads_ = 1;
    ggml_backend_t backend_ = nullptr;
    std::unique_ptr<KvCache> kv_;
    ggml_gallocr_t galloc_ = nullptr;
    std::vector<uint8_t> graph_meta_;   // scratch for the tensor and graph structs of one graph
};

}  // namespace river
