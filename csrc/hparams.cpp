#include "hparams.h"

#include <array>
#include <cmath>
#include <limits>
#include <utility>

#include "common.h"
#include "ggml.h"
#include "gguf_file.h"

namespace river {

namespace {

struct ArchInfo {
    const char * name;
    int rope_mode;
    FfnActivation ffn_act;
    bool gemma;   // scaled embeddings, post-norms, sliding-window layers
};

// Architectures whose block is Llama's pre-norm RMSNorm / RoPE attention / gated MLP.
// qwen2 adds QKV biases and qwen3 q/k norms (optional tensors); gemma3 adds q/k
// norms, norms after attention and FFN, GELU, and sliding-window layers.
constexpr std::array<ArchInfo, 4> k_archs{{
    {"llama", 0, FfnActivation::silu, false},
    {"qwen2", GGML_ROPE_TYPE_NEOX, FfnActivation::silu, false},
    {"qwen3", GGML_ROPE_TYPE_NEOX, FfnActivation::silu, false},
    {"gemma3", GGML_ROPE_TYPE_NEOX, FfnActivation::gelu, true},
}};

// Gemma 3 alternates five sliding-window layers with one global layer unless the
// file says otherwise.
constexpr uint32_t k_gemma_swa_period = 6;

// Far above any real model's widths and depths, far below what overflows int64 products.
constexpr int64_t k_max_size = 1 << 20;

void read_rope_scaling(const GgufFile & file, const std::string & p, HParams & hp) {
    std::string scaling = "linear";   // what a factor without a type means
    if (file.has_key(p + "rope.scaling.type")) {
        scaling = file.get_str(p + "rope.scaling.type");
    }
    if (scaling == "none") {
        return;
    }
    if (scaling != "linear") {
        throw Error("rope scaling '" + printable(scaling) + "' is not supported (supported: none, linear) in " +
                    file.path());
    }
    const float factor = file.find_f32(p + "rope.scaling.factor").value_or(1.0f);
    if (!(factor > 0.0f) || !std::isfinite(factor)) {
        throw Error("invalid rope scaling factor in " + file.path());
    }
    hp.rope_freq_scale = 1.0f / factor;
}

// Which layers use the sliding window: a per-layer array in the file, or a period
// whose last layer is global.
std::vector<bool> read_swa_layers(const GgufFile & file, const std::string & key, int64_t n_layer) {
    if (const GgufValue * v = file.header().find(key); v && v->type == GGUF_TYPE_ARRAY) {
        auto flags = file.find_bool_array(key);
        if (!flags || static_cast<int64_t>(flags->size()) != n_layer) {
            throw Error("'" + key + "' must hold one bool per layer in " + file.path());
        }
        return *flags;
    }
    std::vector<bool> layers(n_layer);
    const uint32_t period = file.find_u32(key).value_or(k_gemma_swa_period);
    for (int64_t il = 0; il < n_layer; ++il) {
        layers[il] = period == 0 || il % period < period - 1;
    }
    return layers;
}

void read_gemma(const GgufFile & file, const std::string & p, HParams & hp) {
    hp.embd_scale = std::sqrt(static_cast<float>(hp.n_embd));
    hp.post_norms = true;
    hp.scale_queries = true;
    hp.logit_softcap = file.find_f32(p + "final_logit_softcapping").value_or(0.0f);
    // Gemma 3 27B scales q.k by its model width per head, not by the head size
    // (its query_pre_attn_scalar); llama.cpp recognizes it by its 62 layers.
    if (hp.n_layer == 62) {
        hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.n_embd / hp.n_head));
    }
    hp.n_swa = file.find_u32(p + "attention.sliding_window").value_or(0);
    if (hp.n_swa > 0) {
        hp.swa_layers = read_swa_layers(file, p + "attention.sliding_window_pattern", hp.n_layer);
        hp.rope_freq_base_swa = file.find_f32(p + "rope.freq_base_swa").value_or(10000.0f);
    }
}

// Sizes a hostile file could set to overflow products, allocate without bound or
// reach an assertion inside ggml (rope over more dimensions than a head has).
void check_hparams(const GgufFile & file, const HParams & hp) {
    const std::string where = " in " + file.path();
    const std::pair<const char *, int64_t> sizes[] = {
        {"embedding_length", hp.n_embd},
        {"feed_forward_length", hp.n_ff},
        {"attention.head_count", hp.n_head},
        {"attention.head_count_kv", hp.n_head_kv},
        {"attention.key_length", hp.n_embd_head},
        {"rope.dimension_count", hp.n_rot},
        {"block_count", hp.n_layer},
    };
    for (const auto & [key, value] : sizes) {
        if (value <= 0 || value > k_max_size) {
            throw Error("invalid " + hp.arch + "." + key + " = " + std::to_string(value) + " (must be in [1, " +
                        std::to_string(k_max_size) + "])" + where);
        }
    }
    // every block has at least nine tensors (two norms and seven matrices)
    if (hp.n_layer > static_cast<int64_t>(file.header().tensors.size()) / 9) {
        throw Error("block_count " + std::to_string(hp.n_layer) + " but only " +
                    std::to_string(file.header().tensors.size()) + " tensors" + where);
    }
    if (hp.n_rot % 2 != 0 || hp.n_rot > hp.n_embd_head) {
        throw Error("rope.dimension_count " + std::to_string(hp.n_rot) + " must be even and at most the head size " +
                    std::to_string(hp.n_embd_head) + where);
    }
    if (hp.n_vocab > std::numeric_limits<int32_t>::max()) {
        throw Error("vocabulary of " + std::to_string(hp.n_vocab) + " tokens is beyond int32 token ids" + where);
    }
    const std::pair<const char *, float> positives[] = {
        {"rope.freq_base", hp.rope_freq_base},
        {"attention.layer_norm_rms_epsilon", hp.rms_eps},
        {"rope.freq_base_swa", hp.rope_freq_base_swa},
    };
    for (const auto & [key, value] : positives) {
        if (!(value > 0.0f) || !std::isfinite(value)) {
            throw Error("invalid " + hp.arch + "." + key + " = " + std::to_string(value) +
                        " (must be finite and positive)" + where);
        }
    }
    if (!std::isfinite(hp.logit_softcap) || hp.logit_softcap < 0.0f) {
        throw Error("invalid final_logit_softcapping" + where);
    }
}

}  // namespace

std::string layer_tensor_name(int64_t il, const char * suffix) {
    return "blk." + std::to_string(il) + "." + suffix;
}

std::vector<std::string> graph_architectures() {
    std::vector<std::string> names;
    for (const auto & a : k_archs) {
        names.emplace_back(a.name);
    }
    return names;
}

HParams read_hparams(const GgufFile & file) {
    HParams hp;
    hp.arch = file.get_str("general.architecture");
    const ArchInfo * arch = nullptr;
    for (const auto & a : k_archs) {
        if (hp.arch == a.name) {
            arch = &a;
        }
    }
    if (!arch) {
        std::string known;
        for (const auto & a : k_archs) {
            known += known.empty() ? a.name : std::string(", ") + a.name;
        }
        throw Error("unsupported architecture '" + printable(hp.arch) + "' in " + file.path() +
                    " (supported: " + known + ")");
    }
    const std::string p = hp.arch + ".";

    hp.n_ctx_train = file.get_u32(p + "context_length");
    hp.n_embd = file.get_u32(p + "embedding_length");
    hp.n_layer = file.get_u32(p + "block_count");
    hp.n_ff = file.get_u32(p + "feed_forward_length");
    hp.n_head = file.get_u32(p + "attention.head_count");
    hp.n_head_kv = file.find_u32(p + "attention.head_count_kv").value_or(hp.n_head);
    if (hp.n_head <= 0 || hp.n_head_kv <= 0 || hp.n_head % hp.n_head_kv != 0) {
        throw Error("invalid attention head counts in " + file.path());
    }
    hp.n_embd_head = file.find_u32(p + "attention.key_length").value_or(hp.n_embd / hp.n_head);
    hp.n_rot = file.find_u32(p + "rope.dimension_count").value_or(hp.n_embd_head);
    if (file.find_u32(p + "attention.value_length").value_or(hp.n_embd_head) != hp.n_embd_head) {
        throw Error("attention.key_length != attention.value_length is not supported (" + file.path() + ")");
    }
    hp.rope_mode = arch->rope_mode;
    hp.rope_freq_base = file.find_f32(p + "rope.freq_base").value_or(10000.0f);
    hp.rms_eps = file.find_f32(p + "attention.layer_norm_rms_epsilon").value_or(1e-5f);
    hp.ffn_act = arch->ffn_act;

    const ggml_tensor * tok_embd = file.find_tensor("token_embd.weight");
    if (!tok_embd) {
        throw Error("missing tensor 'token_embd.weight' in " + file.path());
    }
    hp.n_vocab = tok_embd->ne[1];

    read_rope_scaling(file, p, hp);
    hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.n_embd_head));
    if (arch->gemma) {
        read_gemma(file, p, hp);
    }
    check_hparams(file, hp);
    return hp;
}

}  // namespace river
