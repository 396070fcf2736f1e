// The forward loop: batches of tokens through embedding, blocks and head, on ggml's
// scheduler over the devices the placement names, against one KV cache shared by the
// backbone and the river. Decides each batch's route from the exit thresholds; does
// not sample, tokenize, choose the thresholds or plan the placement (Python does).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cpu_layout.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "gguf_file.h"
#include "graph.h"
#include "graph_cache.h"
#include "hparams.h"
#include "kv_cache.h"
#include "offload.h"
#include "own_mul_mat.h"
#include "weights.h"

namespace river {

// How far a batch's rows equal one-token steps, bit for bit (graph.h, exact_ops.h).
enum class ExactMode {
    off,       // ggml's kernels by batch size: a row can differ in the last bits
    on,        // identical, except products by F32/F16/BF16 matrices and by repacked ones
    bitwise,   // identical: those too, and the backbone's matrices stay in the plain layout
};

struct EngineParams {
    int64_t n_ctx = 2048;    // positions per sequence
    int64_t n_seq = 1;       // sequences the KV cache holds, n_ctx cells each
    int64_t n_batch = 512;   // most positions one graph processes; longer inputs are split
    int n_threads = 1;
    bool use_mmap = true;    // map the backbone and river files; false: read them into memory
    bool reuse_graphs = true;   // keep decode graphs for later steps; false: build every graph afresh
    // The CPU extra buffer types (by name) host matrices may be repacked into; the
    // caller decides which work on this host (none by default: the plain layout
    // never faults).
    std::vector<std::string> cpu_extra_bufts;
    // Whether a row of a batch is computed as the same token's one-token step computes
    // it (see ExactMode), in batches of at most exact_rows tokens that are not a
    // prompt: decode steps and verifies (up to 64 forced tokens, the last one and 64
    // drafted). Prompts, which every decoding prefills alike, and longer batches take
    // ggml's fastest kernels. Layers that take our own attention need it for none of
    // their attention (its rows are those bits in any batch); ggml's takes exact_mul_mat.
    ExactMode exact = ExactMode::on;
    int64_t exact_rows = 129;
    // The weight types (ggml names) whose host matrices take our own batch-invariant
    // products (own_mul_mat.h) in every forward, by own_kernels ("auto": the fastest
    // this CPU runs); the caller decides which passed their probe here (none by default).
    std::vector<std::string> own_types;
    std::string own_kernels = "auto";
    // Attention by our own batch-invariant op (own_attention.h) in every layer that
    // computes on the CPU over a cache in host memory (Engine::attention_plan); false:
    // ggml's products and softmax everywhere, whose prompt rows differ in the last bits
    // from the steps that compute them alone and by where the prompt was cut.
    bool own_attention = true;
    // The types the KV cache stores K and V in (kv_cache_type: "f16" or "q8_0"). A
    // quantized V is stored by rows, which only our own attention reads: it needs
    // own_attention, the cache in host memory and every layer on the CPU.
    std::string type_k = "f16";
    std::string type_v = "f16";
};

// Per layer of each weight set, why it attends by ggml's products and softmax instead
// of our own attention; an empty reason: by ours.
struct AttentionPlan {
    std::vector<std::string> backbone_layers;
    std::vector<std::string> river_layers;   // empty without a river
};

// Where time goes per graph: building and allocating it vs computing it.
struct GraphStats {
    int64_t builds = 0;
    int64_t reuses = 0;
    double build_seconds = 0;     // graph construction, scheduling and allocation
    double compute_seconds = 0;   // inputs set, computed, outputs read
    size_t kept_graphs = 0;       // graphs kept for reuse now, and their compute buffers' bytes
    size_t kept_bytes = 0;
};

// The bytes a placement plan weighs: what each placeable part would occupy.
struct PlacementSizes {
    std::vector<size_t> backbone_layers;
    std::vector<size_t> river_layers;   // with the norms and biases it shares with the backbone
    size_t backbone_head = 0;
    size_t river_head = 0;
    size_t kv_cache = 0;
};

// When and how tokens leave the backbone: the settings a forward runs under (see
// Engine::forward). Built once per policy and handed to every forward that follows it.
struct ExitConfig {
    // thresholds[d]: after d backbone layers a batch exits when the minimum over its
    // tokens of the state signal (see StateSignal) exceeds it; +inf never exits
    // there. At d = 0 no block has run and the signal counts as 1.
    std::vector<float> thresholds;
    StateSignal signal = StateSignal::cosine;
    int64_t tail_layers = 0;   // exited tokens return to the backbone for the last layers
    bool river_head = false;   // exited tokens use the river's low-bit LM head
    // Exited tokens score only token ids [0, exit_vocab) (0: all); the rest of their
    // logits are -inf. A draft's head is a large share of its cost, and BPE vocabularies
    // put frequent tokens first.
    int64_t exit_vocab = 0;
};

// One sequence's tokens in a forward of several (Engine::forward_many).
struct SeqRows {
    int64_t seq = 0;
    const int32_t * ids = nullptr;
    int64_t n_ids = 0;
    bool last_only = false;   // logits of the last position only
    bool prompt = false;      // see Engine::forward
    float * logits = nullptr;   // n_ids rows of n_vocab, or one when last_only
};

class Engine {
public:
    Engine(const std::string & model_path, const EngineParams & params);
    ~Engine();
    Engine(const Engine &) = delete;
    Engine & operator=(const Engine &) = delete;

    const HParams & hparams() const { return hp_; }
    const GgufFile & backbone_file() const { return *file_; }
    int64_t n_ctx() const { return params_.n_ctx; }
    int64_t n_seq() const { return params_.n_seq; }
    ggml_type type_k() const { return type_k_; }
    ggml_type type_v() const { return type_v_; }
    // The bytes the KV cache holds (0 before place()).
    size_t kv_bytes() const { return kv_ ? kv_->n_bytes() : 0; }
    // Positions sequence `seq` holds; throws for a sequence the cache does not hold.
    int64_t n_past(int64_t seq = 0) const;
    int n_threads() const { return n_threads_; }
    void set_n_threads(int n_threads);

    // Before place(): the river's layers are placed with the backbone's.
    void load_river(const std::string & river_path);
    bool has_river() const { return river_file_ != nullptr; }

    // Puts weights and cache where `placement` says, creates the devices' backends
    // and the KV cache. Once, after load_river; forward places everything on the host
    // if it was not called.
    void place(const Placement & placement);
    bool placed() const { return kv_ != nullptr; }
    const Placement & placement() const { return placement_; }
    // Host matrices moved into the CPU's faster layouts by place().
    size_t repacked_tensors() const { return repacked_.count(); }
    // How many matrices our own products multiply, by type name, and by which kernels.
    const OwnMatrices & own_matrices() const { return own_; }
    // Of those, how many each extra buffer type holds, by its name.
    const std::map<std::string, size_t> & repacked_by_buffer_type() const { return repacked_.counts(); }
    PlacementSizes placement_sizes() const;
    // Which attention each layer would take under `placement` (as place() takes it):
    // ours where own_attention is on, the cache is in host memory, the layer computes
    // on the CPU and our op reads the cache's types and head size; ggml's elsewhere
    // (GPU, Vulkan and RPC devices), with the reason.
    AttentionPlan attention_plan(const Placement & placement) const;
    // The plan place() applied.
    const AttentionPlan & attention() const { return attention_; }
    // Bytes of weights (and the cache) per device name, after place().
    std::map<std::string, size_t> placed_bytes() const;
    // Throws when the backbone or river file changed on disk since it was mapped
    // (forward calls it first; a stat per file).
    void check_files() const;
    // The device `name` has gone (the RPC server it belongs to went away): forward and
    // read_kv refuse from then on, and the destructor leaks what lives there, since
    // freeing it would talk to the dead server (see forsake_if_lost).
    void lose_device(const std::string & name);
    // Throws unless `exit` fits this model (a threshold per layer, tail and vocabulary
    // in range); forward runs it on the configuration it is given.
    void check_exit(const ExitConfig & exit) const;

    // Appends `ids` to the sequence. Writes float32 logits to `logits`: one row of
    // n_vocab per position, or only the last position's row when last_only. Tokens
    // leave the backbone as `exit` says; nullptr (or a model without a river): every
    // token runs the full backbone. `prompt`: the ids are a prompt, prefilled alike by
    // every decoding, so its rows need not equal one-token steps (see exact_rows).
    // Throws, with the sequence as it was, when a file changed under its mapping or a
    // logit is NaN or Inf. Runs on sequence `seq` of the cache.
    void forward(const int32_t * ids, int64_t n_ids, bool last_only, const ExitConfig * exit, float * logits,
                 bool prompt = false, int64_t seq = 0);
    // The tokens of several sequences (each at most once) in one batch of at most
    // n_batch rows: each row computed as in a forward of its sequence alone (bit for
    // bit where the products are batch-invariant: our own, and exact rows). `exit`
    // must decide no depth by a check, since a check's minimum would couple the
    // sequences: nullptr (the full backbone) or a configuration that exits at depth 0
    // (every layer on the river). Throws with every sequence as it was.
    void forward_many(const std::vector<SeqRows> & rows, const ExitConfig * exit);
    // Whether a forward under `exit` (checked: check_exit) decides its depth by a
    // similarity check over its batch, so that it cannot share one (forward_many).
    bool decides_by_check(const ExitConfig & exit) const;

    // Backbone layers each token of the last forward ran (n_layer: never left).
    const std::vector<int32_t> & last_exit_layers() const { return last_exit_layers_; }
    // Per depth d, the batch-minimum similarity the last batch was checked with
    // there (NaN where it was not checked).
    const std::vector<float> & last_similarities() const { return last_similarities_; }

    // Cache contents of layer il at positions [pos, pos + n) as float32 rows of
    // n_embd_kv: for tests and inspection.
    void read_kv(int64_t il, int64_t pos, int64_t n, float * k_out, float * v_out, int64_t seq = 0) const;

    // The cache's first n positions (every layer's K and V, the river's rows among
    // them: they share the cache) as bytes, and back, for a prompt cache across
    // requests; load_kv makes n the sequence's length, and throws unless `size` is
    // what save_kv(n) writes.
    std::vector<uint8_t> save_kv(int64_t n, int64_t seq = 0) const;
    void load_kv(int64_t n, const uint8_t * data, size_t size, int64_t seq = 0);

    void rewind(int64_t n_past, int64_t seq = 0);
    void reset(int64_t seq = 0) { rewind(0, seq); }

    // Every graph computed from now on reports its nodes to `callback` (ggml's eval
    // callback: ggml_backend_sched_set_eval_callback); nullptr, the default: none.
    void set_eval_callback(ggml_backend_sched_eval_callback callback, void * user_data) {
        eval_callback_ = callback;
        eval_user_data_ = user_data;
    }

    GraphStats graph_stats() const;
    // Per device name, the ops of the graphs built so far that it cannot run and that
    // ran on the CPU instead (see fallback.h); empty when every op ran where placed.
    std::map<std::string, std::vector<std::string>> fallback_ops() const;
    void reset_graph_stats() { stats_ = GraphStats{}; }
    bool reuse_graphs() const { return params_.reuse_graphs; }

private:
    // Layers [first_layer, end_layer) of one batch in one graph. Layers at or past
    // exit_depth run on the river, except the backbone tail, under the forward's `exit`.
    struct Segment {
        int64_t first_layer;
        int64_t end_layer;
        int64_t exit_depth;
        bool similarity;   // also output cos(in, out) of the last layer
        const ExitConfig & exit;
    };

    // Host copies of one sequence's part of a batch's inputs.
    struct SeqData {
        int64_t seq;
        int64_t first_row;
        int64_t n_tokens;
        int64_t n_kv;                     // cache positions attention reads, padded
        bool exact;                       // rows computed as one-token steps (EngineParams::exact)
        bool last_only;
        float * logits;                   // where its rows of logits go (nullptr: nowhere)
        std::vector<float> kq_mask;       // [n_tokens][n_kv], 0 or -inf
        std::vector<float> kq_mask_swa;   // the same within the sliding window; empty without one
    };

    // Host copies of a batch's inputs: the same for every segment of it.
    struct BatchData {
        std::vector<int32_t> ids;
        std::vector<int32_t> positions;
        std::vector<int64_t> k_rows;      // see BatchInputs
        std::vector<int64_t> v_rows;
        std::vector<int32_t> out_rows;    // the rows the head scores, where not all or the last
        std::vector<SeqData> seqs;
        bool exact = false;               // products by weights as one-token steps (any sequence's exact)
        int64_t n_tokens() const { return static_cast<int64_t>(positions.size()); }
    };

    // Throws naming the first lost device, if any.
    void check_devices() const;
    // Throws unless the cache's types can be read where it is placed (host_cache: in
    // host memory) by the attention the engine runs.
    void check_cache_types(bool host_cache, const AttentionPlan & plan) const;
    // Under `exit` (nullptr: the full backbone), the depth at or after which exiting would
    // run no river layer at all; 0 where no batch leaves the backbone.
    int64_t river_depth_limit(const ExitConfig * exit) const;
    // Whether a batch under `exit` runs every layer before the tail on the river.
    bool exits_at_start(const ExitConfig * exit) const;
    // The first depth after `after` where a batch under `exit` checks its similarity
    // (n_layer: none).
    int64_t next_check(const ExitConfig * exit, int64_t after) const;
    // Checks what a forward of `rows` asks, places the model if it is not yet placed.
    void check_forward(const std::vector<SeqRows> & rows, const ExitConfig * exit);
    int64_t forward_batch(const BatchData & batch, const ExitConfig * exit);
    BatchData batch_data(const std::vector<SeqRows> & rows) const;
    // Runs one segment; returns the minimum over tokens of the similarity, if asked.
    // A segment that ends with the head writes each sequence's logits.
    float run_segment(const Segment & seg, const BatchData & batch);
    void build_segment(const Segment & seg, const GraphKey & key, ggml_context * ctx, ggml_cgraph * gf,
                       ComputeGraph & out);
    // Copies a head's result into each sequence's rows of n_vocab logits and checks them.
    void read_logits(const ggml_tensor * result, const Segment & seg, const BatchData & batch) const;
    // Throws naming the weight set (by the segment's exit depth) when one of the first
    // n_scored logits of a row is NaN or Inf.
    void check_logits(const float * logits, int64_t n_rows, int64_t n_scored, const Segment & seg) const;
    // The residual stream carried between segments: [n_embd, n_tokens]
    ggml_tensor * state_view(ggml_context * ctx, int64_t n_tokens) const;
    const LayerWeights & layer_weights(int64_t il, const Segment & seg) const;
    // Whether layer il of a segment attends by our own op (attention_).
    bool own_attention_in(int64_t il, const Segment & seg) const;
    // Throws unless `placement` names a device per layer of each weight set.
    void check_placement(const Placement & placement) const;
    // The LM head a segment that ends the batch scores with, and how many token ids.
    ggml_tensor * head_weights(ggml_context * ctx, const Segment & seg) const;
    int64_t head_vocab(const Segment & seg) const;

    std::unique_ptr<GgufFile> file_;
    HParams hp_;
    BufferPtr weight_buffer_;
    ModelWeights backbone_;   // as mapped; after place(), the tensors it computes with

    std::unique_ptr<GgufFile> river_file_;
    BufferPtr river_buffer_;
    RiverWeights river_;
    std::vector<int32_t> last_exit_layers_;
    std::vector<float> last_similarities_;

    EngineParams params_;
    ggml_type type_k_ = GGML_TYPE_F16;
    ggml_type type_v_ = GGML_TYPE_F16;
    int n_threads_ = 1;
    ggml_backend_t cpu_backend_ = nullptr;
    ggml_threadpool_t threadpool_ = nullptr;
    Placement placement_;
    AttentionPlan attention_;
    std::unique_ptr<DeviceWeights> device_weights_;
    OwnMatrices own_;
    RepackedTensors repacked_;
    std::vector<ggml_backend_t> device_backends_;   // the placement's devices, not the CPU
    std::set<ggml_backend_dev_t> lost_;             // see lose_device
    std::unique_ptr<KvCache> kv_;
    ggml_context * state_ctx_ = nullptr;
    BufferPtr state_buffer_;
    ggml_tensor * state_ = nullptr;   // residual stream between segments: [n_embd, n_batch]
    std::unique_ptr<GraphCache> graphs_;
    GraphStats stats_;
    ggml_backend_sched_eval_callback eval_callback_ = nullptr;
    void * eval_user_data_ = nullptr;
};

}  // namespace river
