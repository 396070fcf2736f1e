#include "weights.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common.h"
#include "ggml-cpu.h"
#include "gguf_file.h"

namespace river {

const MatrixSlot k_layer_matrices[7] = {
    {"attn_q.weight", &LayerWeights::wq},         {"attn_k.weight", &LayerWeights::wk},
    {"attn_v.weight", &LayerWeights::wv},         {"attn_output.weight", &LayerWeights::wo},
    {"ffn_gate.weight", &LayerWeights::ffn_gate}, {"ffn_up.weight", &LayerWeights::ffn_up},
    {"ffn_down.weight", &LayerWeights::ffn_down},
};

bool is_matrix_type(ggml_type type) {
    if (type == GGML_TYPE_F32) {
        return true;
    }
    // dequantizable (embedding rows, river building) and multiplied by the CPU backend
    return ggml_get_type_traits(type)->to_float != nullptr && ggml_get_type_traits_cpu(type)->vec_dot != nullptr;
}

namespace {

class TensorBinder {
public:
    TensorBinder(const GgufFile & file, ggml_backend_buffer_t buffer) : file_(file), buffer_(buffer) {}

    // Returns the tensor bound to its bytes; nullptr for an absent optional tensor.
    // A 1-D shape is a norm, bias or rope factor (F32); a 2-D one a matrix (a type
    // the CPU backend multiplies with). Dimensions past the shape must be 1.
    ggml_tensor * bind(const std::string & name, std::initializer_list<int64_t> shape, bool required = true) {
        ggml_tensor * t = file_.find_tensor(name);
        if (!t) {
            if (required) {
                throw Error("missing tensor '" + name + "' in " + file_.path());
            }
            return nullptr;
        }
        int dim = 0;
        for (int64_t n : shape) {
            if (t->ne[dim] != n) {
                throw Error("tensor '" + name + "' has shape [" + shape_str(t) + "], expected dimension " +
                            std::to_string(dim) + " = " + std::to_string(n) + " in " + file_.path());
            }
            ++dim;
        }
        for (; dim < GGML_MAX_DIMS; ++dim) {
            if (t->ne[dim] != 1) {
                throw Error("tensor '" + name + "' has shape [" + shape_str(t) + "], expected " +
                            std::to_string(shape.size()) + " dimensions in " + file_.path());
            }
        }
        check_type(name, t, shape.size() == 1);
        if (!t->buffer) {
            // Several names may refer to one tensor (tied embeddings): bind once.
            if (ggml_backend_tensor_alloc(buffer_, t, file_.tensor_data(name)) != GGML_STATUS_SUCCESS) {
                throw Error("cannot bind tensor '" + name + "' in " + file_.path());
            }
        }
        return t;
    }

private:
    void check_type(const std::string & name, const ggml_tensor * t, bool vector) const {
        const ggml_type type = t->type;
        if (vector ? type == GGML_TYPE_F32 : is_matrix_type(type)) {
            return;
        }
        throw Error("tensor '" + name + "' has type " + ggml_type_name(type) + ", which the engine cannot use for " +
                    (vector ? "a vector (norms, biases and rope factors must be f32)" : "a matrix") + " in " +
                    file_.path());
    }

    static std::string shape_str(const ggml_tensor * t) {
        std::string s;
        for (int i = 0; i < ggml_n_dims(t); ++i) {
            s += (i ? ", " : "") + std::to_string(t->ne[i]);
        }
        return s;
    }

    const GgufFile & file_;
    ggml_backend_buffer_t buffer_;
};

void map_file(const GgufFile & file, BufferPtr & buffer) {
    buffer.reset(ggml_backend_cpu_buffer_from_ptr(file.mapping(), file.file_size()));
    if (!buffer) {
        throw Error("cannot create a CPU buffer over " + file.path());
    }
    ggml_backend_buffer_set_usage(buffer.get(), GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
}

// A numeric scalar as text, for error messages.
std::string scalar_text(const GgufValue & v) {
    auto get = [&v](auto x) {
        std::memcpy(&x, v.bytes.data(), std::min(sizeof(x), v.bytes.size()));
        return x;
    };
    switch (v.type) {
        case GGUF_TYPE_UINT8: return std::to_string(get(uint8_t{}));
        case GGUF_TYPE_INT8: return std::to_string(get(int8_t{}));
        case GGUF_TYPE_UINT16: return std::to_string(get(uint16_t{}));
        case GGUF_TYPE_INT16: return std::to_string(get(int16_t{}));
        case GGUF_TYPE_UINT32: return std::to_string(get(uint32_t{}));
        case GGUF_TYPE_INT32: return std::to_string(get(int32_t{}));
        case GGUF_TYPE_UINT64: return std::to_string(get(uint64_t{}));
        case GGUF_TYPE_INT64: return std::to_string(get(int64_t{}));
        case GGUF_TYPE_FLOAT32: return std::to_string(get(float{}));
        case GGUF_TYPE_FLOAT64: return std::to_string(get(double{}));
        case GGUF_TYPE_BOOL: return get(uint8_t{}) ? "true" : "false";
        default: return gguf_type_label(v.type);
    }
}

void check_river_matches(const GgufFile & file, const GgufFile & backbone_file, const HParams & hp) {
    const std::string where = "river " + file.path() + " does not match its backbone: ";
    if (!file.has_key("general.type") || file.get_str("general.type") != "river") {
        throw Error("not a river file (general.type != 'river'): " + file.path());
    }
    const std::string arch = file.get_str("general.architecture");
    if (arch != hp.arch) {
        throw Error(where + "architecture '" + printable(arch) + "' vs '" + hp.arch + "'");
    }
    const auto n_layer = file.find_u32(arch + ".block_count");
    if (!n_layer || *n_layer != hp.n_layer) {
        throw Error(where + "block_count " + (n_layer ? std::to_string(*n_layer) : "missing") + " vs " +
                    std::to_string(hp.n_layer));
    }
    // A river copies its backbone's numeric architecture keys: every one must agree.
    const std::string prefix = arch + ".";
    for (const GgufKv & kv : file.header().kv) {
        if (kv.key.rfind(prefix, 0) != 0 || kv.value.type == GGUF_TYPE_ARRAY || kv.value.type == GGUF_TYPE_STRING) {
            continue;
        }
        const GgufValue * theirs = backbone_file.header().find(kv.key);
        if (!theirs) {
            throw Error(where + "'" + printable(kv.key) + "' is missing in the backbone " + backbone_file.path());
        }
        if (theirs->type != kv.value.type || theirs->bytes != kv.value.bytes) {
            throw Error(where + "'" + printable(kv.key) + "' is " + scalar_text(kv.value) + " in the river, " +
                        scalar_text(*theirs) + " in the backbone " + backbone_file.path());
        }
    }
}

}  // namespace

void forsake_if_lost(BufferPtr & buffer, const std::set<ggml_backend_dev_t> & lost) {
    if (buffer && lost.count(ggml_backend_buft_get_device(ggml_backend_buffer_get_type(buffer.get())))) {
        static_cast<void>(buffer.release());
    }
}

ModelWeights map_weights(const GgufFile & file, const HParams & hp, BufferPtr & buffer) {
    map_file(file, buffer);
    TensorBinder b(file, buffer.get());

    const int64_t n_embd = hp.n_embd, n_ff = hp.n_ff, n_q = hp.n_embd_q(), n_kv = hp.n_embd_kv();
    ModelWeights w;
    w.tok_embd = b.bind("token_embd.weight", {n_embd, hp.n_vocab});
    w.output_norm = b.bind("output_norm.weight", {n_embd});
    w.output = b.bind("output.weight", {n_embd, hp.n_vocab}, false);
    if (!w.output) {
        w.output = w.tok_embd;
    }
    w.rope_freqs = b.bind("rope_freqs.weight", {hp.n_rot / 2}, false);

    w.layers.resize(hp.n_layer);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        LayerWeights & l = w.layers[il];
        auto name = [il](const char * suffix) { return layer_tensor_name(il, suffix); };
        l.attn_norm = b.bind(name("attn_norm.weight"), {n_embd});
        l.wq = b.bind(name("attn_q.weight"), {n_embd, n_q});
        l.wk = b.bind(name("attn_k.weight"), {n_embd, n_kv});
        l.wv = b.bind(name("attn_v.weight"), {n_embd, n_kv});
        l.wo = b.bind(name("attn_output.weight"), {n_q, n_embd});
        l.bq = b.bind(name("attn_q.bias"), {n_q}, false);
        l.bk = b.bind(name("attn_k.bias"), {n_kv}, false);
        l.bv = b.bind(name("attn_v.bias"), {n_kv}, false);
        l.q_norm = b.bind(name("attn_q_norm.weight"), {hp.n_embd_head}, false);
        l.k_norm = b.bind(name("attn_k_norm.weight"), {hp.n_embd_head}, false);
        l.ffn_norm = b.bind(name("ffn_norm.weight"), {n_embd});
        l.ffn_gate = b.bind(name("ffn_gate.weight"), {n_embd, n_ff});
        l.ffn_up = b.bind(name("ffn_up.weight"), {n_embd, n_ff});
        l.ffn_down = b.bind(name("ffn_down.weight"), {n_ff, n_embd});
        l.attn_post_norm = b.bind(name("post_attention_norm.weight"), {n_embd}, hp.post_norms);
        l.ffn_post_norm = b.bind(name("post_ffw_norm.weight"), {n_embd}, hp.post_norms);
    }
    return w;
}

std::vector<ggml_tensor **> tensor_slots(LayerWeights & l) {
    return {&l.attn_norm,
            &l.wq,
            &l.wk,
            &l.wv,
            &l.wo,
            &l.bq,
            &l.bk,
            &l.bv,
            &l.q_norm,
            &l.k_norm,
            &l.attn_post_norm,
            &l.ffn_post_norm,
            &l.ffn_norm,
            &l.ffn_gate,
            &l.ffn_up,
            &l.ffn_down};
}

std::vector<ggml_tensor **> matrix_slots(std::vector<LayerWeights> & layers, ggml_tensor *& output) {
    std::vector<ggml_tensor **> slots;
    for (LayerWeights & l : layers) {
        for (const MatrixSlot & slot : k_layer_matrices) {
            slots.push_back(&(l.*slot.member));
        }
    }
    slots.push_back(&output);
    return slots;
}

RiverWeights map_river_weights(const GgufFile & file, const GgufFile & backbone_file, const HParams & hp,
                               const ModelWeights & backbone, BufferPtr & buffer) {
    check_river_matches(file, backbone_file, hp);
    map_file(file, buffer);
    TensorBinder b(file, buffer.get());

    RiverWeights r;
    r.layers = backbone.layers;  // norms and biases are shared
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        for (const MatrixSlot & slot : k_layer_matrices) {
            const ggml_tensor * bb = backbone.layers[il].*slot.member;
            r.layers[il].*slot.member = b.bind(layer_tensor_name(il, slot.suffix), {bb->ne[0], bb->ne[1]});
        }
    }
    r.output = b.bind("output.weight", {hp.n_embd, hp.n_vocab});
    return r;
}

}  // namespace river
