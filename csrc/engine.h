// The forward loop: batches of tokens through embedding, blocks and head, on one
// backend, against one KV cache shared by the backbone and the river. Decides each
// batch's route from the exit thresholds; does not sample, tokenize or choose the
// thresholds (Python does).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu_layout.h"
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
    bool use_mmap = true;    // map the backbone and river files; false: read them into memory
};

// When and how tokens leave the backbone.
struct ExitConfig {
    // thresholds[d]: after d backbone layers a batch exits when the minimum over its
    // tokens of the state signal (see StateSignal) exceeds it; +inf never exits
    // there. At d = 0 no block has run and the signal counts as 1.
    std::vector<float> thresholds;
    StateSignal signal = StateSignal::cosine;
    int64_t tail_layers = 0;   // exited tokens return to the backbone for the last layers
    bool river_head = false;   // exited tokens use the river's low-bit LM head
};

class Engine {
public:
    Engine(const std::string & model_path, const EngineParams & params);
    ~Engine();
    Engine(const Engine &) = delete;
    Engine & operator=(const Engine &) = delete;

    const HParams & hparams() const { return hp_; }
    const GgufFile & backbone_file() const { return *file_; }
    int64_t n_ctx() const { return kv_->n_ctx(); }
    int64_t n_past() const { return kv_->n_past(); }
    int n_threads() const { return n_threads_; }
    void set_n_threads(int n_threads);

    void load_river(const std::string & river_path);
    bool has_river() const { return river_file_ != nullptr; }
    // Throws when the backbone or river file changed on disk since it was mapped
    // (forward calls it first; a stat per file).
    void check_files() const;
    void set_exit(const ExitConfig & config);

    // Appends `ids` to the sequence. Writes float32 logits to `logits`: one row of
    // n_vocab per position, or only the last position's row when last_only. With
    // use_exit false every token runs the full backbone. Throws, with the sequence
    // as it was, when a file changed under its mapping or a logit is NaN or Inf.
    void forward(const int32_t * ids, int64_t n_ids, bool last_only, bool use_exit, float * logits);

    // Backbone layers each token of the last forward ran (n_layer: never left).
    const std::vector<int32_t> & last_exit_layers() const { return last_exit_layers_; }
    // Per depth d, the batch-minimum similarity the last batch was checked with
    // there (NaN where it was not checked).
    const std::vector<float> & last_similarities() const { return last_similarities_; }

    // Cache contents of layer il at positions [pos, pos + n) as float32 rows of
    // n_embd_kv: for tests and inspection.
    void read_kv(int64_t il, int64_t pos, int64_t n, float * k_out, float * v_out) const;

    void rewind(int64_t n_past) { kv_->rewind(n_past); }
    void reset() { kv_->rewind(0); }

private:
    // Layers [first_layer, end_layer) of one batch in one graph. Layers at or past
    // exit_depth run on the river, except the backbone tail.
    struct Segment {
        int64_t first_layer;
        int64_t end_layer;
        int64_t exit_depth;
        bool similarity;   // also output cos(in, out) of the last layer
    };

    // Host copies of a batch's inputs: the same for every segment of it.
    struct BatchData {
        const int32_t * ids;
        std::vector<int32_t> positions;
        std::vector<float> kq_mask;       // [n_tokens][n_kv], 0 or -inf
        std::vector<float> kq_mask_swa;   // the same within the sliding window; empty without one
        int64_t n_tokens() const { return static_cast<int64_t>(positions.size()); }
    };

    int64_t forward_batch(const int32_t * ids, int64_t n_tokens, bool last_only, bool use_exit, float * logits);
    // Runs one segment; returns the minimum over tokens of the similarity, if asked.
    float run_segment(const Segment & seg, const BatchData & batch, bool last_only, float * logits);
    // Throws naming the weight set (by exit depth) when a row holds NaN or Inf.
    void check_logits(const float * logits, int64_t n_rows, int64_t exit_depth) const;
    // The residual stream carried between segments: [n_embd, n_tokens]
    ggml_tensor * state_view(ggml_context * ctx, int64_t n_tokens) const;
    const LayerWeights & layer_weights(int64_t il, int64_t exit_depth) const;
    ggml_tensor * head_weights(int64_t exit_depth) const;

    std::unique_ptr<GgufFile> file_;
    HParams hp_;
    BufferPtr weight_buffer_;
    ModelWeights backbone_;
    RepackedTensors backbone_repacked_;

    std::unique_ptr<GgufFile> river_file_;
    BufferPtr river_buffer_;
    RiverWeights river_;
    std::unique_ptr<RepackedTensors> river_repacked_;
    ExitConfig exit_;
    std::vector<int32_t> last_exit_layers_;
    std::vector<float> last_similarities_;

    EngineParams params_;
    int n_threads_ = 1;
    ggml_backend_t backend_ = nullptr;
    std::unique_ptr<KvCache> kv_;
    ggml_context * state_ctx_ = nullptr;
    BufferPtr state_buffer_;
    ggml_tensor * state_ = nullptr;   // residual stream between segments: [n_embd, n_batch]
    ggml_gallocr_t galloc_ = nullptr;
    std::vector<uint8_t> graph_meta_; // scratch for the tensor and graph structs of one graph
};

}  // namespace river
