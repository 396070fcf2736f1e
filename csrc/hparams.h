// Hyperparameters of a decoder-only transformer, read from GGUF metadata.
// One struct for every supported architecture; what differs between families is
// data here (rope mode, activation, scales, sliding windows) or an optional tensor
// in weights.*, never a code path copy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace river {

class GgufFile;

enum class FfnActivation {
    silu,   // SwiGLU: llama, qwen
    gelu,   // GeGLU (tanh approximation): gemma
};

struct HParams {
    std::string arch;      // general.architecture: llama, qwen2, qwen3, gemma3
    int64_t n_vocab = 0;
    int64_t n_ctx_train = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t n_embd_head = 0;   // per-head dimension of q, k and v
    int64_t n_ff = 0;
    int64_t n_rot = 0;         // rotated dimensions per head
    int rope_mode = 0;         // 0 = adjacent pairs (llama), GGML_ROPE_TYPE_NEOX = halves (qwen, gemma)
    float rope_freq_base = 10000.0f;
    float rope_freq_scale = 1.0f;   // linear rope scaling: 1 / factor
    float rms_eps = 1e-5f;
    FfnActivation ffn_act = FfnActivation::silu;
    float embd_scale = 1.0f;        // gemma multiplies token embeddings by sqrt(n_embd)
    float attn_scale = 0.0f;        // of q.k; 1/sqrt(n_embd_head) unless the family says otherwise
    bool scale_queries = false;     // gemma applies attn_scale to q itself, before q meets the F16 keys
    bool post_norms = false;        // gemma: RMSNorm after attention and after the FFN, inside the residual
    float logit_softcap = 0.0f;     // 0: none; else logits = c * tanh(logits / c)

    // Sliding-window attention (gemma3): layers with swa_layers[il] see only the
    // last n_swa positions and use their own rope base, without scaling.
    int64_t n_swa = 0;
    std::vector<bool> swa_layers;
    float rope_freq_base_swa = 10000.0f;

    int64_t n_embd_q() const { return n_embd_head * n_head; }
    int64_t n_embd_kv() const { return n_embd_head * n_head_kv; }
    bool is_swa(int64_t il) const { return n_swa > 0 && swa_layers[il]; }
    bool has_swa() const { return n_swa > 0; }
};

// Throws river::Error naming the key when metadata is missing or the architecture
// is not one we build graphs for.
HParams read_hparams(const GgufFile & file);

// The general.architecture values our graph builds.
std::vector<std::string> graph_architectures();

// "blk.<il>.<suffix>" — the GGUF tensor naming scheme.
std::string layer_tensor_name(int64_t il, const char * suffix);

}  // namespace river
