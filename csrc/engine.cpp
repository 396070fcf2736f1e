#include "engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "common.h"
#include "ggml-cpu.h"
#include "own_attention.h"
#include "own_kernels.h"
#include "vocab_check.h"

namespace river {

namespace {

// The covered weight types called `names` (ggml's names, "q4_K"); throws for others.
std::vector<ggml_type> own_types(const std::vector<std::string> & names) {
    std::vector<ggml_type> types;
    std::string covered;   // their names, for the error
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        if (own::layout_of(static_cast<ggml_type>(t))) {
            covered += (covered.empty() ? "" : ", ") + std::string(ggml_type_name(static_cast<ggml_type>(t)));
        }
    }
    for (const std::string & name : names) {
        bool found = false;
        for (int t = 0; t < GGML_TYPE_COUNT && !found; ++t) {
            const char * type_name = ggml_type_name(static_cast<ggml_type>(t));
            if (type_name && name == type_name && own::layout_of(static_cast<ggml_type>(t))) {
                types.push_back(static_cast<ggml_type>(t));
                found = true;
            }
        }
        if (!found) {
            throw Error("our own products do not cover the weight type '" + name + "' (they cover " + covered + ")");
        }
    }
    return types;
}

// Attention reads the cache in multiples of this many positions (the mask hides
// the rest), so consecutive decode steps share one graph shape.
constexpr int64_t k_kv_padding = 256;
// Graphs of at most this many tokens are kept for reuse (decode and verify
// batches); longer ones (prompts) are built for the one use.
constexpr int64_t k_max_kept_tokens = 32;
constexpr size_t k_max_kept_graphs = 64;
// A view of a head's first rows ends at a multiple of this (see head_weights).
constexpr int64_t k_head_row_group = 32;
// The configuration of forwards given none: every token on the full backbone.
const ExitConfig k_full_backbone{};

// Copies host data into a graph input. An input that no node of this graph reads
// (the sliding-window mask of a segment of global layers) was never allocated.
void set_input(ggml_tensor * input, const void * data) {
    if (input && input->buffer) {
        ggml_backend_tensor_set(input, data, 0, ggml_nbytes(input));
    }
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

size_t bytes_of(std::initializer_list<const ggml_tensor *> tensors) {
    size_t n = 0;
    for (const ggml_tensor * t : tensors) {
        n += t ? ggml_nbytes(t) : 0;
    }
    return n;
}

// Whether layer il of a segment that exits at `exit_depth` runs on the river's weights.
bool on_river(int64_t il, int64_t exit_depth, const ExitConfig & exit, int64_t n_layer) {
    return il >= exit_depth && il < n_layer - exit.tail_layers;
}

size_t layer_bytes(LayerWeights layer) {
    size_t n = 0;
    for (ggml_tensor ** t : tensor_slots(layer)) {
        n += *t ? ggml_nbytes(*t) : 0;
    }
    return n;
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
    if (params.n_seq <= 0) {
        throw Error("n_seq must be positive, got " + std::to_string(params.n_seq));
    }
    load_backends();
    for (const std::string & name : params.cpu_extra_bufts) {
        cpu_extra_buffer_type(name);   // throws for a name this ggml lacks, before any work
    }
    own_types(params.own_types);
    own::kernels_named(params.own_kernels);
    file_ = std::make_unique<GgufFile>(model_path, params.use_mmap);
    hp_ = read_hparams(*file_);
    type_k_ = kv_cache_type("type_k", params.type_k, hp_.n_embd_head);
    type_v_ = kv_cache_type("type_v", params.type_v, hp_.n_embd_head);
    // llama.cpp tokenizes for this model: its vocabulary must not be able to abort it
    check_vocabulary_file(model_path, hp_.n_vocab, false);
    backbone_ = map_weights(*file_, hp_, weight_buffer_);

    cpu_backend_ = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, nullptr);
    if (!cpu_backend_) {
        throw Error("cannot initialise the ggml CPU backend");
    }
    set_n_threads(params.n_threads);
    log(LogLevel::info, "loaded " + hp_.arch + " model: " + std::to_string(hp_.n_layer) + " layers, n_embd " +
                            std::to_string(hp_.n_embd) + ", n_vocab " + std::to_string(hp_.n_vocab));
}

Engine::~Engine() {
    if (!lost_.empty()) {   // freeing memory on a lost device would talk to its dead server
        if (graphs_) {
            graphs_->forsake();
        }
        if (kv_) {
            kv_->forsake_if_lost(lost_);
        }
        if (device_weights_) {
            device_weights_->forsake_if_lost(lost_);
        }
    }
    graphs_.reset();
    state_buffer_.reset();
    if (state_ctx_) {
        ggml_free(state_ctx_);
    }
    kv_.reset();
    for (ggml_backend_t backend : device_backends_) {
        ggml_backend_free(backend);
    }
    ggml_backend_free(cpu_backend_);
    if (threadpool_) {
        ggml_threadpool_free(threadpool_);
    }
}

void Engine::set_n_threads(int n_threads) {
    if (n_threads <= 0) {
        throw Error("n_threads must be positive, got " + std::to_string(n_threads));
    }
    // One pool for the engine's life (as llama.cpp keeps one): without it the CPU
    // backend starts and joins its threads for every graph, and a decode step with
    // exit checks runs a graph per checked layer.
    ggml_threadpool_params params = ggml_threadpool_params_default(n_threads);
    ggml_threadpool_t pool = ggml_threadpool_new(&params);
    if (!pool) {
        throw Error("cannot start " + std::to_string(n_threads) + " CPU threads");
    }
    ggml_backend_cpu_set_n_threads(cpu_backend_, n_threads);
    ggml_backend_cpu_set_threadpool(cpu_backend_, pool);
    if (threadpool_) {
        ggml_threadpool_free(threadpool_);
    }
    threadpool_ = pool;
    n_threads_ = n_threads;
}

void Engine::load_river(const std::string & river_path) {
    if (placed()) {
        throw Error("load the river before the model is placed on its devices (before the first forward)");
    }
    auto file = std::make_unique<GgufFile>(river_path, params_.use_mmap);
    BufferPtr buffer;
    RiverWeights weights = map_river_weights(*file, *file_, hp_, backbone_, buffer);
    river_ = std::move(weights);
    river_buffer_ = std::move(buffer);
    river_file_ = std::move(file);
}

PlacementSizes Engine::placement_sizes() const {
    PlacementSizes sizes;
    for (const LayerWeights & layer : backbone_.layers) {
        sizes.backbone_layers.push_back(layer_bytes(layer));
    }
    // a river layer on another device than its backbone layer needs its own copy of
    // the shared norms and biases: counted, so the plan never falls short
    for (const LayerWeights & layer : river_.layers) {
        sizes.river_layers.push_back(layer_bytes(layer));
    }
    sizes.backbone_head = bytes_of({backbone_.output, backbone_.output_norm});
    sizes.river_head = bytes_of({river_.output});
    sizes.kv_cache = KvCache::size_for(hp_, params_.n_ctx, params_.n_seq, type_k_, type_v_);
    return sizes;
}

void Engine::check_placement(const Placement & placement) const {
    const size_t n_layer = static_cast<size_t>(hp_.n_layer);
    if (placement.backbone_layers.size() != n_layer || placement.river_layers.size() != (has_river() ? n_layer : 0)) {
        throw Error("a placement names a device for each of the " + std::to_string(n_layer) +
                    " layers of the backbone" + (has_river() ? " and of the river" : ""));
    }
}

AttentionPlan Engine::attention_plan(const Placement & placement) const {
    check_placement(placement);
    // A cache of one position laid out as this model's, in host memory: whether our op
    // reads its types and head size, asked of the tensors it would read.
    const KvCache layout(hp_, 1, 1, ggml_backend_get_default_buffer_type(cpu_backend_), type_k_, type_v_);
    const auto reason = [&](int64_t il, const std::string & device) -> std::string {
        if (!params_.own_attention) {
            return "own_attention is off";
        }
        if (placement.kv_cache != k_host_device) {
            return "the KV cache is on " + placement.kv_cache;
        }
        if (device != k_host_device) {
            return "the layer computes on " + device;
        }
        const ggml_tensor * k = layout.k(il);
        const ggml_tensor * v = layout.v(il);
        if (!own_attention_supports(k, v, hp_.n_embd_head)) {
            return std::string("our attention does not read a cache of ") + ggml_type_name(k->type) + " K, " +
                   ggml_type_name(v->type) + " V with heads of " + std::to_string(hp_.n_embd_head);
        }
        return "";
    };
    AttentionPlan plan;
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
        plan.backbone_layers.push_back(reason(il, placement.backbone_layers[il]));
        if (has_river()) {
            plan.river_layers.push_back(reason(il, placement.river_layers[il]));
        }
    }
    return plan;
}

void Engine::place(const Placement & placement) {
    if (placed()) {
        throw Error("the model is already placed on its devices");
    }
    AttentionPlan plan = attention_plan(placement);  // which checks the placement too
    check_cache_types(placement_device(placement.kv_cache) == nullptr, plan);
    // the devices named, in the order of the scheduler's preference: offloading
    // devices before the CPU
    std::vector<std::string> names = placement.backbone_layers;
    names.insert(names.end(), placement.river_layers.begin(), placement.river_layers.end());
    names.insert(names.end(), {placement.backbone_head, placement.river_head, placement.kv_cache});
    std::vector<ggml_backend_dev_t> devices;
    for (const std::string & name : names) {
        ggml_backend_dev_t dev = placement_device(name);
        if (dev && std::find(devices.begin(), devices.end(), dev) == devices.end()) {
            devices.push_back(dev);
        }
    }

    // weights: device copies first, then what stays on the host is repacked
    size_t n_tensors = 0;
    for (const GgufFile * f : {file_.get(), river_file_.get()}) {
        n_tensors += f ? f->header().tensors.size() : 0;
    }
    auto copies = std::make_unique<DeviceWeights>(2 * n_tensors);
    place_layers(*copies, backbone_.layers, placement.backbone_layers);
    place_layers(*copies, river_.layers, placement.river_layers);
    ggml_backend_dev_t head_dev = placement_device(placement.backbone_head);
    backbone_.output = copies->on(head_dev, backbone_.output);
    backbone_.output_norm = copies->on(head_dev, backbone_.output_norm);
    river_.output = copies->on(placement_device(placement.river_head), river_.output);
    copies->upload();
    const std::vector<ggml_tensor **> backbone_matrices = matrix_slots(backbone_.layers, backbone_.output);
    const std::vector<ggml_tensor **> river_matrices =
        has_river() ? matrix_slots(river_.layers, river_.output) : std::vector<ggml_tensor **>{};
    const std::vector<ggml_backend_buffer_t> host_buffers{weight_buffer_.get(), river_buffer_.get()};
    // our own products take every host matrix of their types, backbone and river (they are
    // batch-invariant, so a bitwise engine keeps its identity)
    if (!params_.own_types.empty()) {
        std::vector<ggml_tensor **> all = backbone_matrices;
        all.insert(all.end(), river_matrices.begin(), river_matrices.end());
        own_.pack(all, host_buffers, own_types(params_.own_types), own::kernels_named(params_.own_kernels),
                  params_.use_mmap, n_threads_);
    }
    // the rest may be repacked, except that a bitwise engine multiplies the backbone's host
    // matrices in their plain layout
    std::vector<ggml_tensor **> matrices;
    if (params_.exact != ExactMode::bitwise) {
        matrices = backbone_matrices;
    }
    matrices.insert(matrices.end(), river_matrices.begin(), river_matrices.end());
    matrices.erase(std::remove_if(matrices.begin(), matrices.end(),
                                  [&](ggml_tensor ** slot) { return own_.find(*slot) != nullptr; }),
                   matrices.end());
    repacked_.repack(matrices, host_buffers, params_.cpu_extra_bufts);
    device_weights_ = std::move(copies);

    for (ggml_backend_dev_t dev : devices) {
        ggml_backend_t backend = ggml_backend_dev_init(dev, nullptr);
        if (!backend) {
            throw Error(std::string("cannot initialise the backend of ") + ggml_backend_dev_name(dev));
        }
        device_backends_.push_back(backend);
    }
    ggml_backend_dev_t kv_dev = placement_device(placement.kv_cache);
    kv_ = std::make_unique<KvCache>(
        hp_, params_.n_ctx, params_.n_seq,
        kv_dev ? ggml_backend_dev_buffer_type(kv_dev) : ggml_backend_get_default_buffer_type(cpu_backend_), type_k_,
        type_v_);

    ggml_init_params state_params{ggml_tensor_overhead(), nullptr, true};
    state_ctx_ = ggml_init(state_params);
    state_ = ggml_new_tensor_2d(state_ctx_, GGML_TYPE_F32, hp_.n_embd, params_.n_batch);
    ggml_set_name(state_, "residual_state");
    state_buffer_.reset(ggml_backend_alloc_ctx_tensors(state_ctx_, cpu_backend_));

    std::vector<ggml_backend_t> backends = device_backends_;
    backends.push_back(cpu_backend_);
    graphs_ = std::make_unique<GraphCache>(backends, k_max_kept_graphs);
    attention_ = std::move(plan);
    placement_ = placement;
}

void Engine::check_cache_types(bool host_cache, const AttentionPlan & plan) const {
    const auto name = [](const char * option, ggml_type type) {
        return option + std::string("=") + ggml_type_name(type);
    };
    for (auto [option, type] : {std::pair{"type_k", type_k_}, std::pair{"type_v", type_v_}}) {
        if (type != GGML_TYPE_F16 && !host_cache) {
            throw Error(name(option, type) +
                        " needs the KV cache in host memory (n_gpu_layers=0): a cache on a "
                        "device stays F16");
        }
    }
    if (KvCache::v_transposed(type_v_)) {
        return;
    }
    // a V stored by rows is read by our attention only: every layer must take it
    for (const auto * layers : {&plan.backbone_layers, &plan.river_layers}) {
        for (size_t il = 0; il < layers->size(); ++il) {
            if (!(*layers)[il].empty()) {
                throw Error(name("type_v", type_v_) +
                            " needs river-cpp's own attention in every layer (own_attention=True, the layers on the "
                            "CPU): layer " +
                            std::to_string(il) + " takes ggml's, which reads V as F16 only (" + (*layers)[il] + ")");
            }
        }
    }
}

std::map<std::string, size_t> Engine::placed_bytes() const {
    std::map<std::string, size_t> bytes =
        device_weights_ ? device_weights_->bytes_by_device() : std::map<std::string, size_t>{};
    if (kv_) {
        bytes[placement_.kv_cache] += kv_->n_bytes();
    }
    return bytes;
}

GraphStats Engine::graph_stats() const {
    GraphStats stats = stats_;
    if (graphs_) {
        stats.kept_graphs = graphs_->kept();
        stats.kept_bytes = graphs_->kept_bytes();
    }
    return stats;
}

std::map<std::string, std::vector<std::string>> Engine::fallback_ops() const {
    std::map<std::string, std::vector<std::string>> ops;
    if (graphs_) {
        for (const auto & [device, op] : graphs_->fallbacks()) {
            ops[device].push_back(op);
        }
    }
    return ops;
}

int64_t Engine::n_past(int64_t seq) const {
    KvCache::check_seq(seq, params_.n_seq);   // before place() too, when there is no cache yet
    return kv_ ? kv_->n_past(seq) : 0;
}

void Engine::rewind(int64_t n_past, int64_t seq) {
    if (kv_) {
        kv_->rewind(seq, n_past);
    } else if (n_past != 0 || this->n_past(seq) != 0) {
        throw Error("cannot rewind the KV cache to " + std::to_string(n_past) + " (it holds 0 positions)");
    }
}

void Engine::check_files() const {
    file_->check_unchanged();
    if (river_file_) {
        river_file_->check_unchanged();
    }
}

void Engine::lose_device(const std::string & name) {
    lost_.insert(device_by_name(name));
}

void Engine::check_devices() const {
    if (!lost_.empty()) {
        ggml_backend_dev_t dev = *lost_.begin();
        throw Error(std::string("the device ") + ggml_backend_dev_name(dev) + " (" + ggml_backend_dev_description(dev) +
                    ") that holds part of this model has gone away: close the model and load it again");
    }
}

void Engine::check_exit(const ExitConfig & config) const {
    if (static_cast<int64_t>(config.thresholds.size()) != hp_.n_layer) {
        throw Error("exit thresholds need one value per layer (" + std::to_string(hp_.n_layer) + "), got " +
                    std::to_string(config.thresholds.size()));
    }
    if (config.tail_layers < 0 || config.tail_layers > hp_.n_layer) {
        throw Error("tail_layers must be in [0, " + std::to_string(hp_.n_layer) + "], got " +
                    std::to_string(config.tail_layers));
    }
    if (config.exit_vocab < 0 || config.exit_vocab > hp_.n_vocab) {
        throw Error("exit_vocab must be in [0, " + std::to_string(hp_.n_vocab) + "] (0: all), got " +
                    std::to_string(config.exit_vocab));
    }
    for (float t : config.thresholds) {
        if (std::isnan(t)) {
            throw Error("exit thresholds must not be NaN");
        }
    }
}

// ---------------------------------------------------------------- forward

void Engine::check_forward(const std::vector<SeqRows> & rows, const ExitConfig * exit) {
    if (exit) {
        check_exit(*exit);
    }
    std::vector<bool> seen(static_cast<size_t>(params_.n_seq), false);
    for (const SeqRows & r : rows) {
        if (r.n_ids <= 0) {
            throw Error("forward needs at least one token");
        }
        const int64_t held = n_past(r.seq);   // throws for a sequence the cache does not hold
        if (seen[r.seq]) {
            throw Error("sequence " + std::to_string(r.seq) + " appears twice in one forward");
        }
        seen[r.seq] = true;
        if (held + r.n_ids > n_ctx()) {
            throw Error("context overflow: " + std::to_string(held) + " cached + " + std::to_string(r.n_ids) +
                        " new tokens exceed n_ctx = " + std::to_string(n_ctx()));
        }
        for (int64_t i = 0; i < r.n_ids; ++i) {
            if (r.ids[i] < 0 || r.ids[i] >= hp_.n_vocab) {
                throw Error("token id " + std::to_string(r.ids[i]) + " at index " + std::to_string(i) +
                            " is outside the vocabulary [0, " + std::to_string(hp_.n_vocab) + ")");
            }
        }
    }
    check_files();
    check_devices();
    if (!placed()) {
        Placement host;
        host.backbone_layers.assign(hp_.n_layer, k_host_device);
        host.river_layers.assign(has_river() ? hp_.n_layer : 0, k_host_device);
        place(host);
    }
}

void Engine::forward(const int32_t * ids, int64_t n_ids, bool last_only, const ExitConfig * exit, float * logits,
                     bool prompt, int64_t seq) {
    check_forward({SeqRows{seq, ids, n_ids, last_only, prompt, logits}}, exit);
    last_exit_layers_.clear();
    const int64_t n_past_before = n_past(seq);
    try {
        for (int64_t start = 0, n = 0; start < n_ids; start += n) {
            n = std::min(params_.n_batch, n_ids - start);
            const bool is_last = start + n == n_ids;
            float * out = nullptr;
            if (!last_only) {
                out = logits + start * hp_.n_vocab;
            } else if (is_last) {
                out = logits;
            }
            const BatchData batch = batch_data({SeqRows{seq, ids + start, n, last_only, prompt, out}});
            const int64_t depth = forward_batch(batch, exit);
            last_exit_layers_.insert(last_exit_layers_.end(), n, static_cast<int32_t>(depth));
        }
    } catch (...) {
        kv_->rewind(seq, n_past_before);
        throw;
    }
}

int64_t Engine::river_depth_limit(const ExitConfig * exit) const {
    return has_river() && exit ? hp_.n_layer - exit->tail_layers : 0;
}

bool Engine::exits_at_start(const ExitConfig * exit) const {
    return river_depth_limit(exit) > 0 && exit->thresholds[0] < 1.0f;
}

int64_t Engine::next_check(const ExitConfig * exit, int64_t after) const {
    for (int64_t d = after + 1; d < river_depth_limit(exit); ++d) {
        if (std::isfinite(exit->thresholds[d]) || exit->thresholds[d] < 0) {
            return d;
        }
    }
    return hp_.n_layer;
}

bool Engine::decides_by_check(const ExitConfig & exit) const {
    return !exits_at_start(&exit) && next_check(&exit, 0) < hp_.n_layer;
}

void Engine::forward_many(const std::vector<SeqRows> & rows, const ExitConfig * exit) {
    if (rows.empty()) {
        throw Error("forward_many needs at least one sequence");
    }
    check_forward(rows, exit);
    if (exit && decides_by_check(*exit)) {
        throw Error(
            "a forward of several sequences runs the full backbone or every layer on the river: "
            "an exit decided by a check would depend on every sequence in the batch");
    }
    int64_t n_tokens = 0;
    for (const SeqRows & r : rows) {
        n_tokens += r.n_ids;
    }
    if (n_tokens > params_.n_batch) {
        throw Error("a forward of several sequences takes at most n_batch = " + std::to_string(params_.n_batch) +
                    " tokens, got " + std::to_string(n_tokens));
    }
    std::vector<int64_t> n_past_before;
    for (const SeqRows & r : rows) {
        n_past_before.push_back(n_past(r.seq));
    }
    try {
        const int64_t depth = forward_batch(batch_data(rows), exit);
        last_exit_layers_.assign(n_tokens, static_cast<int32_t>(depth));
    } catch (...) {
        for (size_t i = 0; i < rows.size(); ++i) {
            kv_->rewind(rows[i].seq, n_past_before[i]);
        }
        throw;
    }
}

void Engine::check_logits(const float * logits, int64_t n_rows, int64_t n_scored, const Segment & seg) const {
    const int64_t n_vocab = hp_.n_vocab;
    for (int64_t row = 0; row < n_rows; ++row) {
        // an exponent of all ones is Inf or NaN; integer tests vectorize where isfinite's branch would not
        const float * values = logits + row * n_vocab;
        uint32_t bad = 0;
        for (int64_t i = 0; i < n_scored; ++i) {
            uint32_t bits;
            std::memcpy(&bits, values + i, sizeof(bits));
            bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
        }
        if (!bad) {
            continue;
        }
        std::string weights;
        if (seg.exit_depth >= hp_.n_layer) {
            weights = "the backbone weights (" + file_->path() + ")";
        } else {
            weights = "the river weights (" + river_file_->path() + ", after " + std::to_string(seg.exit_depth) +
                      " backbone layers" + (seg.exit.river_head ? ", with the river's LM head" : "") + ")";
        }
        throw Error("non-finite logits (NaN or Inf) at row " + std::to_string(row) + " of the batch, computed with " +
                    weights + ": the file is damaged or its values overflow; the sequence is left as it was");
    }
}

// Sequence-level exit: the whole batch leaves at the first checked depth where the
// least similar token passes. Returns the exit depth (n_layer: never left).
int64_t Engine::forward_batch(const BatchData & batch, const ExitConfig * exit) {
    const int64_t n_layer = hp_.n_layer;
    const ExitConfig & config = exit ? *exit : k_full_backbone;
    int64_t done = 0;   // backbone layers this batch has run
    last_similarities_.assign(n_layer, std::numeric_limits<float>::quiet_NaN());
    if (exits_at_start(exit)) {
        run_segment({0, n_layer, 0, false, config}, batch);
        return 0;
    }
    for (int64_t check = next_check(exit, 0); check < n_layer; check = next_check(exit, check)) {
        const float similarity = run_segment({done, check, n_layer, true, config}, batch);
        done = check;
        last_similarities_[check] = similarity;
        if (similarity > config.thresholds[check]) {
            run_segment({done, n_layer, done, false, config}, batch);
            return done;
        }
    }
    run_segment({done, n_layer, n_layer, false, config}, batch);
    return n_layer;
}

const LayerWeights & Engine::layer_weights(int64_t il, const Segment & seg) const {
    return on_river(il, seg.exit_depth, seg.exit, hp_.n_layer) ? river_.layers[il] : backbone_.layers[il];
}

bool Engine::own_attention_in(int64_t il, const Segment & seg) const {
    const std::vector<std::string> & reasons =
        on_river(il, seg.exit_depth, seg.exit, hp_.n_layer) ? attention_.river_layers : attention_.backbone_layers;
    return reasons[il].empty();
}

ggml_tensor * Engine::head_weights(ggml_context * ctx, const Segment & seg) const {
    ggml_tensor * head = seg.exit_depth < hp_.n_layer && seg.exit.river_head ? river_.output : backbone_.output;
    // Its first rows (token ids): a prefix of its data, also in the CPU's repacked
    // layouts, which interleave groups of up to 16 rows (a view that ends inside a
    // group computes garbage); read_logits hides the rows past head_vocab.
    const int64_t n_rows = std::min(GGML_PAD(head_vocab(seg), k_head_row_group), hp_.n_vocab);
    if (n_rows == hp_.n_vocab) {
        return head;
    }
    return ggml_view_2d(ctx, head, head->ne[0], n_rows, head->nb[1], 0);
}

int64_t Engine::head_vocab(const Segment & seg) const {
    return seg.exit_depth < hp_.n_layer && seg.exit.exit_vocab > 0 ? seg.exit.exit_vocab : hp_.n_vocab;
}

ggml_tensor * Engine::state_view(ggml_context * ctx, int64_t n_tokens) const {
    return ggml_view_2d(ctx, state_, hp_.n_embd, n_tokens, state_->nb[1], 0);
}

Engine::BatchData Engine::batch_data(const std::vector<SeqRows> & rows) const {
    BatchData batch;
    const int64_t n_cells = kv_->n_cells(), n_embd_kv = hp_.n_embd_kv();
    const float masked = -std::numeric_limits<float>::infinity();
    bool all_rows = true;   // the head scores every row
    for (const SeqRows & r : rows) {
        const int64_t n_past = kv_->n_past(r.seq), n_tokens = r.n_ids, first_cell = kv_->first_cell(r.seq);
        SeqData seq{r.seq,
                    batch.n_tokens(),
                    n_tokens,
                    std::min(GGML_PAD(n_past + n_tokens, k_kv_padding), n_ctx()),
                    params_.exact != ExactMode::off && !r.prompt && n_tokens <= params_.exact_rows,
                    r.last_only,
                    r.logits,
                    {},
                    {}};
        const int64_t n_kv = seq.n_kv;
        seq.kq_mask.resize(n_kv * n_tokens);
        for (int64_t i = 0; i < n_tokens; ++i) {
            // token i (position n_past + i) sees the sequence's positions 0 .. n_past + i
            for (int64_t j = 0; j < n_kv; ++j) {
                seq.kq_mask[i * n_kv + j] = j <= n_past + i ? 0.0f : masked;
            }
        }
        if (hp_.has_swa()) {
            // and in sliding-window layers only the last n_swa of them, itself included
            seq.kq_mask_swa = seq.kq_mask;
            for (int64_t i = 0; i < n_tokens; ++i) {
                for (int64_t j = 0; j <= n_past + i - hp_.n_swa; ++j) {
                    seq.kq_mask_swa[i * n_kv + j] = masked;
                }
            }
        }
        for (int64_t t = 0; t < n_tokens; ++t) {
            const int64_t cell = first_cell + n_past + t;
            batch.ids.push_back(r.ids[t]);
            batch.positions.push_back(static_cast<int32_t>(n_past + t));
            batch.k_rows.push_back(cell);
            for (int64_t c = 0; kv_->v_transposed() && c < n_embd_kv;
                 ++c) {   // in (token, dim) order, as the graph reshapes Vcur
                batch.v_rows.push_back(c * n_cells + cell);
            }
            if (!r.last_only || t == n_tokens - 1) {
                batch.out_rows.push_back(static_cast<int32_t>(seq.first_row + t));
            }
        }
        all_rows = all_rows && !r.last_only;
        batch.exact = batch.exact || seq.exact;
        batch.seqs.push_back(std::move(seq));
    }
    if (all_rows || rows.size() == 1) {
        batch.out_rows.clear();   // the graph takes all rows, or a view of the last
    }
    return batch;
}

void Engine::build_segment(const Segment & seg, const GraphKey & key, ggml_context * ctx, ggml_cgraph * gf,
                           ComputeGraph & out) {
    const int64_t n_tokens = key.n_tokens;
    BatchInputs & in = out.in;
    in.n_tokens = n_tokens;
    in.positions = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_tokens);
    in.k_rows = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, n_tokens);
    for (ggml_tensor * t : {in.positions, in.k_rows}) {
        ggml_set_input(t);
    }
    if (kv_->v_transposed()) {
        in.v_rows = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, hp_.n_embd_kv() * n_tokens);
        ggml_set_input(in.v_rows);
    }
    int64_t first_row = 0, n_out = 0;
    for (const SeqKey & k : key.seqs) {
        SeqAttention seq{k.first_cell, first_row, k.n_tokens, k.n_kv, k.exact, nullptr, nullptr};
        seq.kq_mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k.n_kv, k.n_tokens);
        ggml_set_input(seq.kq_mask);
        if (hp_.has_swa()) {
            seq.kq_mask_swa = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k.n_kv, k.n_tokens);
            ggml_set_input(seq.kq_mask_swa);
        }
        in.seqs.push_back(seq);
        first_row += k.n_tokens;
        n_out += k.last_only ? 1 : k.n_tokens;
    }
    GraphContext g{ctx, gf, hp_, *kv_, in, backbone_.rope_freqs};
    g.exact = key.exact;
    g.exact_float_weights = params_.exact == ExactMode::bitwise;
    OwnInputs own_inputs;
    g.own = &own_;
    g.own_inputs = &own_inputs;

    // [n_embd, n_tokens]
    ggml_tensor * inpL = nullptr;
    if (seg.first_layer == 0) {
        out.tokens = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_tokens);
        ggml_set_input(out.tokens);
        inpL = ggml_get_rows(ctx, backbone_.tok_embd, out.tokens);
        if (hp_.embd_scale != 1.0f) {
            inpL = ggml_scale(ctx, inpL, hp_.embd_scale);
        }
    } else {
        inpL = state_view(ctx, n_tokens);
    }
    ggml_tensor * block_input = inpL;
    for (int64_t il = seg.first_layer; il < seg.end_layer; ++il) {
        block_input = inpL;
        g.own_attention = own_attention_in(il, seg);
        inpL = build_layer(g, layer_weights(il, seg), il, inpL);
    }

    if (seg.similarity) {
        out.similarity = build_state_similarity(ctx, seg.exit.signal, block_input, inpL);
        ggml_set_output(out.similarity);
        ggml_build_forward_expand(gf, out.similarity);
    }
    if (seg.end_layer == hp_.n_layer) {
        if (n_out == 1 && n_tokens > 1) {
            // [n_embd, 1]: only the last position needs the (large) head
            inpL = ggml_view_2d(ctx, inpL, hp_.n_embd, 1, inpL->nb[1], inpL->nb[1] * (n_tokens - 1));
        } else if (n_out < n_tokens) {
            // [n_embd, n_out]: each sequence's rows that it asks logits of
            in.out_rows = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_out);
            ggml_set_input(in.out_rows);
            inpL = ggml_get_rows(ctx, inpL, in.out_rows);
        }
        out.result = build_head(g, backbone_.output_norm, head_weights(ctx, seg), inpL);
        ggml_set_output(out.result);
        ggml_build_forward_expand(gf, out.result);
    } else {
        ggml_build_forward_expand(gf, ggml_cpy(ctx, inpL, state_view(ctx, n_tokens)));
    }
}

float Engine::run_segment(const Segment & seg, const BatchData & batch) {
    const int64_t n_tokens = batch.n_tokens();
    const bool has_head = seg.end_layer == hp_.n_layer;
    GraphKey key;
    key.first_layer = seg.first_layer;
    key.end_layer = seg.end_layer;
    key.exit_depth = seg.exit_depth;
    // Settings a segment's graph does not depend on are left out of its key, so that
    // forwards under different configurations share the graphs they have in common
    // (a draft's checks and a verify batch both run backbone layers only).
    const bool exits = seg.exit_depth < hp_.n_layer;
    key.tail_layers = exits ? seg.exit.tail_layers : 0;
    key.river_head = exits && seg.exit.river_head;
    key.head_vocab = has_head ? head_vocab(seg) : 0;
    key.similarity = seg.similarity;
    key.signal = seg.similarity ? static_cast<int>(seg.exit.signal) : 0;
    key.n_tokens = n_tokens;
    key.exact = batch.exact;
    for (const SeqData & seq : batch.seqs) {
        key.seqs.push_back({kv_->first_cell(seq.seq), seq.n_tokens, seq.n_kv, seq.exact, has_head && seq.last_only});
    }

    const auto start = std::chrono::steady_clock::now();
    bool built = false;
    ComputeGraph & graph = graphs_->get(
        key, [&](ggml_context * ctx, ggml_cgraph * gf, ComputeGraph & out) { build_segment(seg, key, ctx, gf, out); },
        // a batch of several sequences is kept by none: its shape (each sequence's cells,
        // rows and n_kv) rarely comes back, and every kept graph holds compute buffers
        params_.reuse_graphs && n_tokens <= k_max_kept_tokens && batch.seqs.size() == 1, built);
    const auto computing = std::chrono::steady_clock::now();
    if (built) {
        stats_.builds += 1;
        stats_.build_seconds += seconds_since(start);
    } else {
        stats_.reuses += 1;
    }

    set_input(graph.tokens, batch.ids.data());
    set_input(graph.in.positions, batch.positions.data());
    set_input(graph.in.k_rows, batch.k_rows.data());
    set_input(graph.in.v_rows, batch.v_rows.data());
    set_input(graph.in.out_rows, batch.out_rows.data());
    for (size_t i = 0; i < batch.seqs.size(); ++i) {
        set_input(graph.in.seqs[i].kq_mask, batch.seqs[i].kq_mask.data());
        set_input(graph.in.seqs[i].kq_mask_swa, batch.seqs[i].kq_mask_swa.data());
    }
    ggml_backend_sched_set_eval_callback(graph.sched, eval_callback_, eval_user_data_);
    if (ggml_backend_sched_graph_compute(graph.sched, graph.gf) != GGML_STATUS_SUCCESS) {
        throw Error("graph computation failed");
    }
    if (has_head) {
        for (const SeqData & seq : batch.seqs) {
            kv_->advance(seq.seq, seq.n_tokens);
        }
        read_logits(graph.result, seg, batch);
    }
    float min_similarity = std::numeric_limits<float>::infinity();
    if (graph.similarity) {
        std::vector<float> values(n_tokens);
        ggml_backend_tensor_get(graph.similarity, values.data(), 0, ggml_nbytes(graph.similarity));
        min_similarity = *std::min_element(values.begin(), values.end());
    }
    stats_.compute_seconds += seconds_since(computing);
    return min_similarity;
}

void Engine::read_logits(const ggml_tensor * result, const Segment & seg, const BatchData & batch) const {
    const int64_t n_vocab = hp_.n_vocab, n_scored = head_vocab(seg);
    int64_t first = 0;   // the sequence's first row of the result
    for (const SeqData & seq : batch.seqs) {
        const int64_t n_rows = seq.last_only ? 1 : seq.n_tokens;
        if (seq.logits) {
            // rows of n_vocab: the scored ids, then -inf for the ones left out
            for (int64_t row = 0; row < n_rows; ++row) {
                float * out = seq.logits + row * n_vocab;
                ggml_backend_tensor_get(result, out, (first + row) * result->nb[1], n_scored * sizeof(float));
                std::fill(out + n_scored, out + n_vocab, -std::numeric_limits<float>::infinity());
            }
            check_logits(seq.logits, n_rows, n_scored, seg);
        }
        first += n_rows;
    }
}

void Engine::read_kv(int64_t il, int64_t pos, int64_t n, float * k_out, float * v_out, int64_t seq) const {
    check_devices();
    if (il < 0 || il >= hp_.n_layer || pos < 0 || n < 0 || pos + n > n_past(seq)) {
        throw Error("read_kv: layer " + std::to_string(il) + " positions [" + std::to_string(pos) + ", " +
                    std::to_string(pos + n) + ") are not in the cache");
    }
    kv_->read(seq, il, pos, n, k_out, v_out);
}

std::vector<uint8_t> Engine::save_kv(int64_t n, int64_t seq) const {
    check_devices();
    if (!kv_) {
        throw Error("save_kv: the engine is not placed yet (no cache)");
    }
    std::vector<uint8_t> state(kv_->state_size(n));
    kv_->save(seq, n, state.data());
    return state;
}

void Engine::load_kv(int64_t n, const uint8_t * data, size_t size, int64_t seq) {
    check_devices();
    if (!kv_) {
        throw Error("load_kv: the engine is not placed yet (no cache)");
    }
    try {
        kv_->load(seq, n, data, size);
    } catch (const Error & e) {
        throw Error(std::string("load_kv: ") + e.what());
    }
}

}  // namespace river
