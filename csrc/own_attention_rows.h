// The block kernels of our own attention (own_attention.h): a block of query rows and
// heads that read one KV head, over its keys, the same arithmetic compiled for the
// baseline CPU and for AVX2 + F16C, which give the same bits (own_attention_rows.inc
// writes every operation out in order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ggml.h"
#include "own_attention.h"

namespace river {

constexpr int k_lanes = 8;

// ggml's q8_0 block (own_attention_reads checks its size against ggml's): an F16 scale d,
// then 32 int8 values q; value i is d * q[i], one rounding, so every way of computing it
// gives the same bits.
constexpr int64_t k_q8_0_values = 32;
struct Q8Block {
    ggml_fp16_t d;
    int8_t q[k_q8_0_values];
};
static_assert(sizeof(Q8Block) == sizeof(ggml_fp16_t) + k_q8_0_values, "a q8_0 block is packed");

// Rows n_rows x heads n_heads that share one KV head, each (row, head) pair computed
// alone (see own_attention.h). Byte strides: q of row r, head h at q + r * q_row +
// h * q_head (head floats); key j at k + j * k_stride (head values of k_type: F16, or
// q8_0 blocks); V of v_type F16, transposed: channel d's values of every key at
// v + d * v_stride; V of q8_0, by rows: key j's head values at v + j * v_stride; row r's
// mask (n_kv floats) at mask + r * mask_row; out of row r, head h at out + r * out_row +
// h * head floats.
struct AttentionBlock {
    const char * q;
    size_t q_row, q_head;
    const char * k;
    size_t k_stride;
    ggml_type k_type;
    const char * v;
    size_t v_stride;
    ggml_type v_type;
    const char * mask;
    size_t mask_row;
    char * out;
    size_t out_row;
    int64_t n_rows, n_heads, n_kv, head;
    float kq_scale;
};

// One thread's working memory: a tile's keys and values in F32 (keys: [head][tile], key j
// of channel i at i * tile + j; values: [tile][head]; rows: quantized keys dequantized,
// [tile][head], before their transposition), each row's mask
// over the tile and its kept keys (bit j: key j), each pair's running maximum, sum and
// accumulator (head values).
struct AttentionScratch {
    std::vector<float> keys, values, rows, mask, max, sum, acc;
    std::vector<uint32_t> keep;
};

using AttentionBlockKernel = void (*)(const AttentionBlock & b, AttentionScratch & s);

void attention_block_baseline(const AttentionBlock & b, AttentionScratch & s);
void attention_block_avx2_kernel(const AttentionBlock & b, AttentionScratch & s);
// attention_block_avx2_kernel; nullptr where this build has none (not x86)
extern const AttentionBlockKernel attention_block_avx2;

}  // namespace river
