#include "graph_cache.h"

#include <algorithm>

#include "common.h"
#include "fallback.h"

namespace river {

namespace {

constexpr size_t k_max_graph_nodes = 8192;

}  // namespace

bool SeqKey::operator==(const SeqKey & o) const {
    return first_cell == o.first_cell && n_tokens == o.n_tokens && n_kv == o.n_kv && exact == o.exact &&
           last_only == o.last_only;
}

bool GraphKey::operator==(const GraphKey & o) const {
    return first_layer == o.first_layer && end_layer == o.end_layer && exit_depth == o.exit_depth &&
           tail_layers == o.tail_layers && river_head == o.river_head && head_vocab == o.head_vocab &&
           similarity == o.similarity && signal == o.signal && n_tokens == o.n_tokens && exact == o.exact &&
           seqs == o.seqs;
}

struct GraphCache::Slot {
    GraphKey key;
    bool valid = false;
    uint64_t last_use = 0;
    // the tensor and graph structs of the graph: left uninitialized (ggml_init writes
    // what it uses), so that a kept graph's pages are only those its structs fill
    std::unique_ptr<uint8_t[]> meta;
    size_t meta_size = 0;
    ggml_context * ctx = nullptr;
    ComputeGraph graph;

    ~Slot() {
        if (graph.sched) {
            ggml_backend_sched_free(graph.sched);
        }
        if (ctx) {
            ggml_free(ctx);
        }
    }
};

GraphCache::GraphCache(std::vector<ggml_backend_t> backends, size_t capacity)
    : backends_(std::move(backends)), capacity_(capacity) {}

GraphCache::~GraphCache() = default;

void GraphCache::clear() {
    slots_.clear();
    scratch_.reset();
}

size_t GraphCache::kept_bytes() const {
    size_t bytes = 0;
    for (const auto & slot : slots_) {
        if (slot->graph.sched) {
            for (ggml_backend_t backend : backends_) {
                bytes += ggml_backend_sched_get_buffer_size(slot->graph.sched, backend);
            }
        }
    }
    return bytes;
}

void GraphCache::forsake() {
    if (scratch_) {
        scratch_->graph.sched = nullptr;
    }
    for (auto & slot : slots_) {
        slot->graph.sched = nullptr;
    }
}

void GraphCache::build_into(Slot & slot, const GraphKey & key, const BuildFn & build) {
    slot.valid = false;
    if (!slot.graph.sched) {
        slot.graph.sched = ggml_backend_sched_new(backends_.data(), nullptr, static_cast<int>(backends_.size()),
                                                  k_max_graph_nodes, /*parallel*/ false, /*op_offload*/ false);
        slot.meta_size =
            ggml_tensor_overhead() * k_max_graph_nodes + ggml_graph_overhead_custom(k_max_graph_nodes, false);
        slot.meta.reset(new uint8_t[slot.meta_size]);
    }
    ggml_backend_sched_reset(slot.graph.sched);
    if (slot.ctx) {
        ggml_free(slot.ctx);
    }
    ggml_init_params params{slot.meta_size, slot.meta.get(), true};
    slot.ctx = ggml_init(params);
    ggml_backend_sched_t sched = slot.graph.sched;
    slot.graph = ComputeGraph{};
    slot.graph.sched = sched;
    slot.graph.gf = ggml_new_graph_custom(slot.ctx, k_max_graph_nodes, false);
    build(slot.ctx, slot.graph.gf, slot.graph);
    if (!ggml_backend_sched_alloc_graph(sched, slot.graph.gf)) {
        throw Error("cannot allocate the compute graph");
    }
    for (const auto & found : find_fallbacks(sched, slot.graph.gf, backends_)) {
        if (fallbacks_.insert(found).second) {
            log(LogLevel::warn, found.first + " cannot run " + found.second + ": the scheduler runs it on the CPU");
        }
    }
    slot.key = key;
    slot.valid = true;
}

ComputeGraph & GraphCache::get(const GraphKey & key, const BuildFn & build, bool keep, bool & built) {
    ++clock_;
    built = false;
    if (!keep) {
        if (!scratch_) {
            scratch_ = std::make_unique<Slot>();
        }
        build_into(*scratch_, key, build);
        built = true;
        return scratch_->graph;
    }
    for (auto & slot : slots_) {
        if (slot->valid && slot->key == key) {
            slot->last_use = clock_;
            return slot->graph;
        }
    }
    Slot * target = nullptr;
    if (slots_.size() < capacity_) {
        slots_.push_back(std::make_unique<Slot>());
        target = slots_.back().get();
    } else {
        target = std::min_element(slots_.begin(), slots_.end(), [](const auto & a, const auto & b) {
                     return a->last_use < b->last_use;
                 })->get();
    }
    build_into(*target, key, build);
    target->last_use = clock_;
    built = true;
    return target->graph;
}

}  // namespace river
