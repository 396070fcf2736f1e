// Hyperparameters of a decoder-only transformer, read from GGUF metadata.
// One struct for every supported architecture; what differs between families is
// data here (rope mode) or an optional tensor in weights.*, never a code path copy.
#pragma once

#include <cstdint>
#include <string>

namespace river {

class GgufFile;

struct HParams {
    std::string arch;      // general.architecture: llama, qwen2, qwen3
    int64_t n_vocab = 0;
    int64_t n_ctx_train = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t n_embd_head = 0;   // per-head dimension of q, k and v
    int64_t n_ff = 0;
    int64_t n_rot = 0;         // rotated dimensions per head
    int rope_mode = 0;         // 0 = adjacent pairs (llama), GGML_ROPE_TYPE_NEOX = halves (qwen)
    float rope_freq_base = 10000.0f;
    float rms_eps = 1e-5f;

    int64_t n_embd_q() const { return n_embd_head * n_head; }
    int64_t n_embd_kv() const { return n_embd_head * n_head_kv; }
};

// Throws river::Error naming the key when metadata is missing or the architecture
// is not one we build graphs for.
HParams read_hparams(const GgufFile & file);

// "blk.<il>.<suffix>" — the GGUF tensor naming scheme.
std::string layer_tensor_name(int64_t il, const char * suffix);

}  // namespace river
