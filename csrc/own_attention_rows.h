// The row kernels of our own attention (own_attention.h): one query row of one head over
// its keys, the same arithmetic compiled for the baseline CPU and for AVX2 + F16C, which
// give the same bits (own_attention_rows.inc writes every operation out in order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "own_attention.h"

namespace river {

constexpr int k_lanes = 8;

// One thread's working rows: a key converted to F32, a tile's values of one channel,
// the tile's scores and weights, the accumulator (key and acc: head values, values: a tile).
struct AttentionScratch {
    std::vector<float> key, values, acc;
    float score[k_attention_tile], weight[k_attention_tile];
    bool keep[k_attention_tile];
};

// Row t's head over its keys (see own_attention.h). k: key j's values at k + j * k_stride
// (F16); v: channel d's values of every key at v + d * v_stride (F16); mask: n_kv values;
// out: head values.
using AttentionRow = void (*)(const float * q, const char * k, size_t k_stride, const char * v, size_t v_stride,
                              const float * mask, int64_t n_kv, int64_t head, float kq_scale, AttentionScratch & s,
                              float * out);

void attention_row_baseline(const float * q, const char * k, size_t k_stride, const char * v, size_t v_stride,
                            const float * mask, int64_t n_kv, int64_t head, float kq_scale, AttentionScratch & s,
                            float * out);
void attention_row_avx2_kernel(const float * q, const char * k, size_t k_stride, const char * v, size_t v_stride,
                               const float * mask, int64_t n_kv, int64_t head, float kq_scale, AttentionScratch & s,
                               float * out);
// attention_row_avx2_kernel; nullptr where this build has none (not x86)
extern const AttentionRow attention_row_avx2;

}  // namespace river
