// Weight sets of a model: the tensors one forward pass multiplies with.
// Owns the ggml tensors that point into a mapped GGUF (zero-copy); does not own the
// mapping itself (GgufFile) nor any activation or cache memory.
#pragma once

#include <memory>
#include <set>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "hparams.h"

namespace river {

class GgufFile;

// One transformer block. Absent optional tensors are nullptr.
struct LayerWeights {
    ggml_tensor * attn_norm = nullptr;
    ggml_tensor * wq = nullptr;
    ggml_tensor * wk = nullptr;
    ggml_tensor * wv = nullptr;
    ggml_tensor * wo = nullptr;
    ggml_tensor * bq = nullptr;       // qwen2
    ggml_tensor * bk = nullptr;
    ggml_tensor * bv = nullptr;
    ggml_tensor * q_norm = nullptr;   // qwen3, gemma3
    ggml_tensor * k_norm = nullptr;
    ggml_tensor * attn_post_norm = nullptr;   // gemma3
    ggml_tensor * ffn_post_norm = nullptr;
    ggml_tensor * ffn_norm = nullptr;
    ggml_tensor * ffn_gate = nullptr;
    ggml_tensor * ffn_up = nullptr;
    ggml_tensor * ffn_down = nullptr;
};

// The matrices a river re-quantizes; every other tensor of a block is shared.
struct MatrixSlot {
    const char * suffix;
    ggml_tensor * LayerWeights::* member;
};
extern const MatrixSlot k_layer_matrices[7];

struct ModelWeights {
    ggml_tensor * tok_embd = nullptr;
    ggml_tensor * output_norm = nullptr;
    ggml_tensor * output = nullptr;       // the LM head; token_embd when tied
    ggml_tensor * rope_freqs = nullptr;   // llama3 frequency factors
    std::vector<LayerWeights> layers;
};

struct BufferDeleter {
    void operator()(ggml_backend_buffer_t b) const { ggml_backend_buffer_free(b); }
};
using BufferPtr = std::unique_ptr<ggml_backend_buffer, BufferDeleter>;

// Lets go of `buffer` without freeing it when it lives in the memory of one of `lost`
// (devices whose RPC server went away): ggml's RPC client frees a remote buffer by a
// command on the server's connection, and a command on a dead connection aborts the
// process. The leak is the price of a server that went away, once per buffer.
void forsake_if_lost(BufferPtr & buffer, const std::set<ggml_backend_dev_t> & lost);

// A river: the backbone's blocks with low-bit matrices. Norms and biases point at
// the backbone's tensors; `output` is the low-bit LM head.
struct RiverWeights {
    std::vector<LayerWeights> layers;
    ggml_tensor * output = nullptr;
};

// The slots of every tensor of a block, absent ones (nullptr) included.
std::vector<ggml_tensor **> tensor_slots(LayerWeights & layer);

// The slots of every matrix a token multiplies with (blocks and LM head), so that
// their tensors can be moved to a faster layout.
std::vector<ggml_tensor **> matrix_slots(std::vector<LayerWeights> & layers, ggml_tensor *& output);

// Binds every tensor of `file` to its bytes in the mapping through one CPU buffer
// over the whole file, checks shapes against `hp` and returns the weight set.
// `buffer` receives the buffer, which must outlive the weights.
ModelWeights map_weights(const GgufFile & file, const HParams & hp, BufferPtr & buffer);

// Binds a river file's matrices, after checking that it was made for a backbone of
// this architecture and shape (a clear error names the first mismatch).
RiverWeights map_river_weights(const GgufFile & file, const GgufFile & backbone_file, const HParams & hp,
                               const ModelWeights & backbone, BufferPtr & buffer);

// Whether the engine can multiply with (and dequantize) a matrix of this type.
bool is_matrix_type(ggml_type type);

}  // namespace river
