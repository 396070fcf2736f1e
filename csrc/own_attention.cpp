// Our own attention's custom op (own_attention.h): its threads' shares of blocks of rows
// and heads, the choice of block kernel, and the baseline kernel (own_attention_rows.inc,
// compiled without contraction like every own_* file).
#include "own_attention.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "own_attention_rows.h"

namespace river {
namespace {

// y[c * y_stride + r] = x[r * x_stride + c] in F32, r < rows, c < cols: row by row.
inline void to_f32_transposed(const ggml_fp16_t * x, size_t x_stride, int64_t rows, int64_t cols, float * y,
                              size_t y_stride) {
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        ggml_cpu_fp16_to_fp32(x + r * x_stride, row.data(), cols);
        for (int64_t c = 0; c < cols; ++c) {
            y[c * y_stride + r] = row[static_cast<size_t>(c)];
        }
    }
}

// Row r's cols values of q8_0 blocks at x + r * x_stride, to y + r * y_stride in F32.
inline void q8_0_to_f32(const char * x, size_t x_stride, int64_t rows, int64_t cols, float * y, size_t y_stride) {
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c0 = 0; c0 < cols; c0 += k_q8_0_values) {
            Q8Block block;
            std::memcpy(&block, x + r * x_stride + c0 / k_q8_0_values * sizeof(Q8Block), sizeof(block));
            const float d = ggml_fp16_to_fp32(block.d);
            for (int64_t i = 0; i < k_q8_0_values; ++i) {
                y[r * y_stride + c0 + i] = d * static_cast<float>(block.q[i]);
            }
        }
    }
}

}  // namespace
}  // namespace river

#define OWN_ATTENTION_BLOCK attention_block_baseline
#include "own_attention_rows.inc"

namespace river {

namespace {

// Rows of one block: its pairs share each tile's keys and values, converted once.
constexpr int64_t k_block_rows = 16;

// The work is cut into blocks of k_block_rows rows by the query heads of one KV head (or
// a part of them, where there are fewer such blocks than threads, as in a step); thread
// ith takes every nth block, so that the early blocks of a causal prompt, which read fewer
// keys, fall to every thread alike. Each pair is computed alone, so neither nth nor the
// cut changes a bit. The block kernel is the op's own: one function per kernel, since the
// userdata is the scale.
template <const AttentionBlockKernel * kernel>
void attention_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const float kq_scale = *static_cast<const float *>(userdata);
    const ggml_tensor * q = dst->src[0];
    const ggml_tensor * k = dst->src[1];
    const ggml_tensor * v = dst->src[2];
    const ggml_tensor * mask = dst->src[3];
    const int64_t head = q->ne[0], n_head = q->ne[1], n_tokens = q->ne[2];
    const int64_t n_head_kv = k->ne[2], group = n_head / n_head_kv;
    const int64_t row_blocks = (n_tokens + k_block_rows - 1) / k_block_rows;
    const int64_t parts = std::min(group, (nth + row_blocks * n_head_kv - 1) / (row_blocks * n_head_kv));
    thread_local AttentionScratch scratch;
    for (int64_t u = ith; u < row_blocks * n_head_kv * parts; u += nth) {
        const int64_t part = u % parts, hk = u / parts % n_head_kv, t0 = u / parts / n_head_kv * k_block_rows;
        const int64_t h0 = hk * group + group * part / parts, h1 = hk * group + group * (part + 1) / parts;
        const AttentionBlock block{static_cast<const char *>(q->data) + t0 * q->nb[2] + h0 * q->nb[1],
                                   q->nb[2],
                                   q->nb[1],
                                   static_cast<const char *>(k->data) + hk * k->nb[2],
                                   k->nb[1],
                                   k->type,
                                   static_cast<const char *>(v->data) + hk * v->nb[2],
                                   v->nb[1],
                                   v->type,
                                   static_cast<const char *>(mask->data) + t0 * mask->nb[1],
                                   mask->nb[1],
                                   static_cast<char *>(dst->data) + t0 * dst->nb[1] + h0 * head * sizeof(float),
                                   dst->nb[1],
                                   std::min(k_block_rows, n_tokens - t0),
                                   h1 - h0,
                                   k->ne[1],
                                   head,
                                   kq_scale};
        (*kernel)(block, scratch);
    }
}

const AttentionBlockKernel k_baseline = attention_block_baseline;

bool avx2_here() {
#if defined(__x86_64__) || defined(_M_X64)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
    return false;
#endif
}

}  // namespace

std::vector<std::string> own_attention_kernels() {
    std::vector<std::string> names{"baseline"};
    if (attention_block_avx2 && avx2_here()) {
        names.emplace_back("avx2");
    }
    return names;
}

bool own_attention_reads(ggml_type type_k, ggml_type type_v, int64_t head) {
    const auto reads = [head](ggml_type type) {
        return type == GGML_TYPE_F16 || (type == GGML_TYPE_Q8_0 && ggml_type_size(type) == sizeof(Q8Block) &&
                                         ggml_blck_size(type) == k_q8_0_values && head % k_q8_0_values == 0);
    };
    return reads(type_k) && reads(type_v) && head % k_lanes == 0;
}

bool own_attention_supports(const ggml_tensor * cache_k, const ggml_tensor * cache_v, int64_t head) {
    return own_attention_reads(cache_k->type, cache_v->type, head) && cache_k->buffer &&
           ggml_backend_buffer_is_host(cache_k->buffer) && cache_v->buffer &&
           ggml_backend_buffer_is_host(cache_v->buffer);
}

ggml_tensor * own_attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * mask,
                            const float * kq_scale, const std::string & kernels) {
    static const std::vector<std::string> here = own_attention_kernels();
    const std::string name = kernels == "auto" ? here.back() : kernels;
    if (std::find(here.begin(), here.end(), name) == here.end()) {
        throw Error("own attention has no kernels '" + kernels + "' on this CPU");
    }
    const int64_t head = q->ne[0], n_head = q->ne[1], n_tokens = q->ne[2], n_kv = k->ne[1], n_head_kv = k->ne[2];
    // V: F16 transposed [n_kv, head, n_head_kv], or quantized by rows [head, n_kv, n_head_kv]
    const bool v_rows = v->type != GGML_TYPE_F16;
    const bool fits = q->type == GGML_TYPE_F32 && q->nb[0] == sizeof(float) && q->ne[3] == 1 &&
                      own_attention_reads(k->type, v->type, head) && k->nb[0] == ggml_type_size(k->type) &&
                      k->ne[0] == head && v->nb[0] == ggml_type_size(v->type) && v->ne[0] == (v_rows ? head : n_kv) &&
                      v->ne[1] == (v_rows ? n_kv : head) && v->ne[2] == n_head_kv && n_head_kv > 0 &&
                      n_head % n_head_kv == 0 && mask && mask->type == GGML_TYPE_F32 && mask->nb[0] == sizeof(float) &&
                      mask->ne[0] == n_kv && mask->ne[1] == n_tokens;
    if (!fits) {
        throw Error(std::string("own_attention cannot attend with ") + ggml_get_name(q) + " over " + ggml_get_name(k) +
                    " and " + ggml_get_name(v));
    }
    ggml_tensor * args[] = {q, k, v, mask};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, head * n_head, n_tokens, 1, 1, args, 4,
                          name == "avx2" ? attention_op<&attention_block_avx2> : attention_op<&k_baseline>,
                          GGML_N_TASKS_MAX, const_cast<float *>(kq_scale));
}

}  // namespace river
