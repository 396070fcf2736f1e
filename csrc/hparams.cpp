#include "hparams.h"

#include <array>

#include "common.h"
#include "ggml.h"
#include "gguf_file.h"

namespace river {

namespace {

struct ArchInfo {
    const char * name;
    int rope_mode;
};

// Architectures whose block is the pre-norm RMSNorm / RoPE attention / SwiGLU MLP of
// Llama; qwen2 adds QKV biases and qwen3 q/k norms, both optional tensors.
constexpr std::array<ArchInfo, 3> k_archs{{
    {"llama", 0},
    {"qwen2", GGML_ROPE_TYPE_NEOX},
    {"qwen3", GGML_ROPE_TYPE_NEOX},
}};

}  // namespace

std::string layer_tensor_name(int64_t il, const char * suffix) {
    return "blk." + std::to_string(il) + "." + suffix;
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
        throw Error("unsupported architecture '" + hp.arch + "' in " + file.path() + " (supported: " + known + ")");
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
    hp.rope_mode = arch->rope_mode;
    hp.rope_freq_base = file.find_f32(p + "rope.freq_base").value_or(10000.0f);
    hp.rms_eps = file.find_f32(p + "attention.layer_norm_rms_epsilon").value_or(1e-5f);

    const ggml_tensor * tok_embd = file.find_tensor("token_embd.weight");
    if (!tok_embd) {
        throw Error("missing tensor 'token_embd.weight' in " + file.path());
    }
    hp.n_vocab = tok_embd->ne[1];

    if (file.has_key(p + "rope.scaling.type")) {
        const std::string scaling = file.get_str(p + "rope.scaling.type");
        if (scaling != "none") {
            throw Error("rope scaling '" + scaling + "' is not supported yet (" + file.path() + ")");
        }
    }
    if (hp.n_layer <= 0 || hp.n_embd <= 0 || hp.n_ff <= 0) {
        throw Error("invalid layer or embedding sizes in " + file.path());
    }
    return hp;
}

}  // namespace river
