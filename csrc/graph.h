// ggml graph builders: one transformer block, the state similarity, the head.
// Pure functions from tensors to tensors; they own nothing and decide nothing —
// which weights compute which layer is the engine's business.
#pragma once

#include <vector>

#include "ggml.h"
#include "hparams.h"
#include "kv_cache.h"
#include "own_mul_mat.h"
#include "weights.h"

namespace river {

// One sequence's rows of a batch: they attend to that sequence's cells only, as they
// would in a batch of their own.
struct SeqAttention {
    int64_t first_cell = 0;   // the cache cell of the sequence's position 0
    int64_t first_row = 0;    // its first row in the batch
    int64_t n_tokens = 0;
    int64_t n_kv = 0;         // the sequence's cells attention reads, padded
    bool exact = false;       // ggml attention's products by the cache as one-token steps compute them
    ggml_tensor * kq_mask = nullptr;      // F32 [n_kv, n_tokens], 0 or -inf (causal, and the padding)
    ggml_tensor * kq_mask_swa = nullptr;  // the same within the sliding window; nullptr without one
};

// Inputs of one batch: rows of one or more sequences, each a run of consecutive
// positions. A graph's shape depends only on each sequence's row count, cells and
// n_kv (padded so that many consecutive batches share it): where a sequence stands
// is data, so one graph serves every batch of its shape.
struct BatchInputs {
    ggml_tensor * positions = nullptr;    // I32 [n_tokens]
    ggml_tensor * k_rows = nullptr;       // I64 [n_tokens]: the cache rows of K (and of V by rows) this batch writes
    ggml_tensor * v_rows = nullptr;       // I64 [n_embd_kv * n_tokens]: the elements of transposed V it writes;
                                     // nullptr where V is stored by rows (KvCache::v_transposed)
    ggml_tensor * out_rows = nullptr;  // I32 [n_out]: the rows the head scores; nullptr: all, or the last
    std::vector<SeqAttention> seqs;
    int64_t n_tokens = 0;
};

struct GraphContext {
    ggml_context * ctx;
    ggml_cgraph * gf;
    const HParams & hp;
    const KvCache & kv;
    const BatchInputs & in;
    ggml_tensor * rope_freqs;  // nullptr unless the model has llama3 frequency factors
    // Compute every row's products by weights as a one-token step does (exact_mul_mat
    // for the products it supports), so that a row's result does not depend on the
    // batch it is in (attention's are each sequence's own: SeqAttention::exact).
    bool exact = false;
    // ... by float (F32, F16, BF16) matrices too, where exact_mul_mat costs verifies the
    // most (vec_dot converts a row again for each column, sgemm once per tile)
    bool exact_float_weights = false;
    // Matrices packed for our own products, which every batch (exact or not) takes for
    // them; nullptr: none.
    const OwnMatrices * own = nullptr;
    OwnInputs * own_inputs = nullptr;  // this graph's quantized inputs; set with `own`
    // The layer being built attends by our own op (own_attention.h), whose rows are the
    // same bits in any batch (the engine's choice per layer: Engine::attention_plan);
    // false: by ggml's products and softmax.
    bool own_attention = false;
};

// One pre-norm block (with gemma's post-norms when the model has them); writes this
// batch's K/V of layer il into the cache.
// inpL: [n_embd, n_tokens] -> [n_embd, n_tokens]
ggml_tensor * build_layer(const GraphContext & g, const LayerWeights & w, int64_t il, ggml_tensor * inpL);

// How much a block left the residual stream alone, per token; 1 = untouched.
enum class StateSignal {
    cosine,  // cos(h_before, h_after), the paper's signal
    update_norm,  // 1 - |h_after - h_before| / |h_before|: the relative size of the update
};

// The state signal per token of the residual stream before and after a block.
// [n_embd, n_tokens] x 2 -> [1, n_tokens]
ggml_tensor * build_state_similarity(ggml_context * ctx, StateSignal signal, ggml_tensor * before, ggml_tensor * after);

// Final RMSNorm, LM head and (gemma) logit soft-capping. [n_embd, n_out] -> [n_vocab, n_out]
ggml_tensor * build_head(const GraphContext & g, ggml_tensor * output_norm, ggml_tensor * output, ggml_tensor * cur);

}  // namespace river
