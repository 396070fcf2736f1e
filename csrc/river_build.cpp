#include "river_build.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include "common.h"
#include "ggml_ptr.h"
#include "gguf.h"
#include "gguf_file.h"
#include "weights.h"

namespace river {

namespace {

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

struct FileCloser {
    void operator()(FILE * f) const { std::fclose(f); }
};

struct GgufDeleter {
    void operator()(gguf_context * c) const { gguf_free(c); }
};

template <typename T>
T scalar(const GgufValue & v) {
    T x;
    std::memcpy(&x, v.bytes.data(), sizeof(T));
    return x;
}

// One tensor of the river file: where it comes from and what it becomes.
struct RiverTensor {
    std::string name;
    const ggml_tensor * source;   // the backbone tensor (bound to the mapping)
    ggml_type type;
};

// Rows [row0, row0 + n_rows) of `src`, as float32.
void dequantize_rows(const ggml_tensor * src, int64_t row0, int64_t n_rows, float * out) {
    const int64_t n_per_row = src->ne[0];
    const uint8_t * rows = static_cast<const uint8_t *>(src->data) + row0 * src->nb[1];
    if (src->type == GGML_TYPE_F32) {
        std::memcpy(out, rows, sizeof(float) * n_per_row * n_rows);
        return;
    }
    const ggml_type_traits * traits = ggml_get_type_traits(src->type);
    if (!traits->to_float) {
        throw Error(std::string("cannot dequantize tensor '") + src->name + "' of type " + ggml_type_name(src->type));
    }
    traits->to_float(rows, out, n_per_row * n_rows);
}

// Quantizes `src` into `dst` (ggml_nbytes of the target type), rows split over threads.
void quantize_tensor(const ggml_tensor * src, ggml_type type, uint8_t * dst, int n_threads) {
    const int64_t n_per_row = src->ne[0];
    const int64_t n_rows = ggml_nrows(src);
    const size_t row_size = ggml_row_size(type, n_per_row);
    const int64_t rows_per_thread = (n_rows + n_threads - 1) / n_threads;

    auto work = [&](int64_t row0) {
        const int64_t n = std::min(rows_per_thread, n_rows - row0);
        std::vector<float> f32(static_cast<size_t>(n * n_per_row));
        dequantize_rows(src, row0, n, f32.data());
        ggml_quantize_chunk(type, f32.data(), dst + row0 * row_size, 0, n, n_per_row, nullptr);
    };
    std::vector<std::thread> threads;
    for (int64_t row0 = rows_per_thread; row0 < n_rows; row0 += rows_per_thread) {
        threads.emplace_back(work, row0);
    }
    work(0);
    for (auto & t : threads) {
        t.join();
    }
}

std::vector<RiverTensor> plan_tensors(const GgufFile & backbone, const HParams & hp, const RiverSpec & spec) {
    std::vector<RiverTensor> plan;
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        for (const MatrixSlot & slot : k_layer_matrices) {
            const std::string name = layer_tensor_name(il, slot.suffix);
            const ggml_tensor * t = backbone.find_tensor(name);
            if (!t) {
                throw Error("missing tensor '" + name + "' in " + backbone.path());
            }
            plan.push_back({name, t, river_type_for_row(spec.layer_types[il], t->ne[0])});
        }
    }
    const ggml_tensor * head = backbone.find_tensor("output.weight");
    if (!head) {
        head = backbone.find_tensor("token_embd.weight");
    }
    plan.push_back({"output.weight", head, river_type_for_row(spec.head_type, head->ne[0])});
    return plan;
}

void copy_architecture_keys(const GgufFile & backbone, const HParams & hp, gguf_context * out) {
    const std::string prefix = hp.arch + ".";
    for (const GgufKv & kv : backbone.header().kv) {
        const GgufValue & v = kv.value;
        if (kv.key.rfind(prefix, 0) != 0 || v.type == GGUF_TYPE_ARRAY || v.type == GGUF_TYPE_STRING) {
            continue;
        }
        const char * key = kv.key.c_str();
        switch (v.type) {
            case GGUF_TYPE_UINT32: gguf_set_val_u32(out, key, scalar<uint32_t>(v)); break;
            case GGUF_TYPE_INT32: gguf_set_val_i32(out, key, scalar<int32_t>(v)); break;
            case GGUF_TYPE_UINT64: gguf_set_val_u64(out, key, scalar<uint64_t>(v)); break;
            case GGUF_TYPE_FLOAT32: gguf_set_val_f32(out, key, scalar<float>(v)); break;
            case GGUF_TYPE_BOOL: gguf_set_val_bool(out, key, v.bytes[0] != 0); break;
            default: break;
        }
    }
}

}  // namespace

ggml_type river_type_from_name(const std::string & name) {
    const std::string wanted = lower(name);
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const ggml_type type = static_cast<ggml_type>(t);
        const ggml_type_traits * traits = ggml_get_type_traits(type);
        if (!traits->type_name || lower(traits->type_name) != wanted || traits->blck_size == 0) {
            continue;
        }
        if (ggml_quantize_requires_imatrix(type)) {
            throw Error("river type '" + name +
                        "' needs an importance matrix; choose one of q4_0, q4_k, iq4_nl, q5_k, "
                        "q6_k, q8_0");
        }
        if (type != GGML_TYPE_F32 && !traits->from_float_ref) {
            throw Error("ggml cannot quantize to river type '" + name + "'");
        }
        return type;
    }
    throw Error("unknown river type '" + name + "' (try q4_0, q4_k, iq4_nl, q5_k, q6_k, q8_0)");
}

ggml_type river_type_for_row(ggml_type wanted, int64_t n_per_row) {
    ggml_type type = wanted;
    while (n_per_row % ggml_blck_size(type) != 0) {
        switch (type) {
            case GGML_TYPE_Q2_K:
            case GGML_TYPE_Q3_K:
            case GGML_TYPE_IQ4_XS: type = GGML_TYPE_IQ4_NL; break;
            case GGML_TYPE_Q4_K: type = GGML_TYPE_Q5_0; break;
            case GGML_TYPE_Q5_K: type = GGML_TYPE_Q5_1; break;
            case GGML_TYPE_Q6_K: type = GGML_TYPE_Q8_0; break;
            default: type = GGML_TYPE_F16; break;
        }
    }
    return type;
}

void build_river(const GgufFile & backbone, const HParams & hp, const RiverSpec & spec, const std::string & out_path,
                 int n_threads, const ProgressFn & progress) {
    if (static_cast<int64_t>(spec.layer_types.size()) != hp.n_layer) {
        throw Error("river spec has " + std::to_string(spec.layer_types.size()) + " layer types for a model with " +
                    std::to_string(hp.n_layer) + " layers");
    }
    n_threads = std::max(1, n_threads);
    const std::vector<RiverTensor> plan = plan_tensors(backbone, hp, spec);
    for (const RiverTensor & t : plan) {
        if (!t.source->data) {
            throw Error("backbone tensor '" + t.name + "' is not mapped");
        }
    }

    std::unique_ptr<gguf_context, GgufDeleter> out(gguf_init_empty());
    gguf_set_val_str(out.get(), "general.architecture", hp.arch.c_str());
    gguf_set_val_str(out.get(), "general.type", "river");
    copy_architecture_keys(backbone, hp, out.get());
    for (const auto & [key, value] : spec.metadata) {
        gguf_set_val_str(out.get(), key.c_str(), value.c_str());
    }

    ContextPtr ctx = new_metadata_context(plan.size());
    for (const RiverTensor & t : plan) {
        ggml_tensor * info = ggml_new_tensor(ctx.get(), t.type, ggml_n_dims(t.source), t.source->ne);
        ggml_set_name(info, t.name.c_str());
        gguf_add_tensor(out.get(), info);
    }

    const std::string tmp_path = out_path + ".tmp";
    std::unique_ptr<FILE, FileCloser> file(std::fopen(tmp_path.c_str(), "wb"));
    if (!file) {
        throw Error("cannot write river file: " + tmp_path);
    }
    std::vector<uint8_t> buffer(gguf_get_meta_size(out.get()));
    gguf_get_meta_data(out.get(), buffer.data());
    bool ok = std::fwrite(buffer.data(), 1, buffer.size(), file.get()) == buffer.size();

    const size_t alignment = gguf_get_alignment(out.get());
    for (size_t i = 0; i < plan.size() && ok; ++i) {
        const ggml_tensor * info = ggml_get_tensor(ctx.get(), plan[i].name.c_str());
        const size_t nbytes = ggml_nbytes(info);
        buffer.assign(GGML_PAD(nbytes, alignment), 0);
        quantize_tensor(plan[i].source, plan[i].type, buffer.data(), n_threads);
        ok = std::fwrite(buffer.data(), 1, buffer.size(), file.get()) == buffer.size();
        if (progress) {
            progress(static_cast<int64_t>(i + 1), static_cast<int64_t>(plan.size()));
        }
    }
    ok = std::fclose(file.release()) == 0 && ok;
    if (!ok || std::rename(tmp_path.c_str(), out_path.c_str()) != 0) {
        std::remove(tmp_path.c_str());
        throw Error("failed writing river file: " + out_path);
    }
}

}  // namespace river
