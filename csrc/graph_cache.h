// Compute graphs kept for reuse. A decode step runs the same few graph shapes
// again and again (a check segment, the segment after an exit, a verify batch), so
// each shape is built and allocated once, in its own scheduler, and later steps
// only set its inputs and compute. Knows nothing of what a graph computes: the
// engine builds it through a callback.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ggml-backend.h"
#include "graph.h"

namespace river {

// What a segment's graph depends on of one sequence's part of the batch.
struct SeqKey {
    int64_t first_cell = 0;
    int64_t n_tokens = 0;
    int64_t n_kv = 0;
    bool exact = false;       // attention's products as one-token steps
    bool last_only = false;   // the head scores its last row only
    bool operator==(const SeqKey & o) const;
};

// Everything a segment's graph topology depends on.
struct GraphKey {
    int64_t first_layer = 0;
    int64_t end_layer = 0;
    int64_t exit_depth = 0;
    int64_t tail_layers = 0;
    bool river_head = false;
    int64_t head_vocab = 0;   // token ids the head scores (0: the segment has no head)
    bool similarity = false;
    int signal = 0;
    int64_t n_tokens = 0;
    bool exact = false;   // products by weights computed as one-token steps
    std::vector<SeqKey> seqs;
    bool operator==(const GraphKey & o) const;
};

// A built, allocated graph with the tensors the engine reads and writes.
struct ComputeGraph {
    ggml_backend_sched_t sched = nullptr;
    ggml_cgraph * gf = nullptr;
    BatchInputs in;
    ggml_tensor * tokens = nullptr;       // I32 [n_tokens]; nullptr when the segment starts from the state
    ggml_tensor * similarity = nullptr;   // [1, n_tokens]; nullptr unless asked
    ggml_tensor * result = nullptr;       // logits; nullptr unless the segment ends with the head
};

class GraphCache {
public:
    using BuildFn = std::function<void(ggml_context *, ggml_cgraph *, ComputeGraph &)>;

    // Graphs run on `backends` (the CPU last); at most `capacity` are kept.
    GraphCache(std::vector<ggml_backend_t> backends, size_t capacity);
    ~GraphCache();
    GraphCache(const GraphCache &) = delete;
    GraphCache & operator=(const GraphCache &) = delete;

    // The graph for `key`, built and allocated by `build` unless kept from before.
    // keep false: built in a scratch slot that the next such graph replaces (large
    // batches: their buffers are large and their shapes rarely repeat). `built`
    // says whether this call built it.
    ComputeGraph & get(const GraphKey & key, const BuildFn & build, bool keep, bool & built);
    void clear();
    // Lets go of every graph's scheduler without freeing it: a scheduler frees its
    // compute buffers, one per device, only all together, so when a device's RPC
    // server went away (see forsake_if_lost) the host's compute buffers leak with
    // the remote ones.
    void forsake();
    // (device, op) pairs the scheduler ran on the CPU because the device cannot
    // (see fallback.h), over every graph built so far; each is logged once as found.
    const std::set<std::pair<std::string, std::string>> & fallbacks() const { return fallbacks_; }
    // The graphs kept now, and the compute buffer bytes they hold on every device.
    size_t kept() const { return slots_.size(); }
    size_t kept_bytes() const;

private:
    struct Slot;
    void build_into(Slot & slot, const GraphKey & key, const BuildFn & build);

    std::vector<ggml_backend_t> backends_;
    size_t capacity_;
    uint64_t clock_ = 0;
    std::vector<std::unique_ptr<Slot>> slots_;
    std::unique_ptr<Slot> scratch_;
    std::set<std::pair<std::string, std::string>> fallbacks_;
};

}  // namespace river
