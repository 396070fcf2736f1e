// Our own attention's custom op (own_attention.h): the per-row online softmax, its exp
// and the fixed lane structure of its sums. Compiled without contraction (CMakeLists.txt):
// every float operation happens as written, so the vectorizer may only widen the lanes.
#include "own_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

namespace river {

namespace {

constexpr int k_lanes = 8;
constexpr float k_minus_inf = -INFINITY;

// The lanes' sum in one fixed tree (the halves first, as a 256-bit register folds).
inline float sum_lanes(const float * l) {
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

// q . k over n values (a multiple of 8): element i into lane i % 8.
inline float dot_lanes(const float * q, const float * k, int64_t n) {
    float lanes[k_lanes] = {};
    for (int64_t i = 0; i < n; i += k_lanes) {
        for (int l = 0; l < k_lanes; ++l) {
            lanes[l] = lanes[l] + q[i + l] * k[i + l];
        }
    }
    return sum_lanes(lanes);
}

// e^x for x <= 0 in plain float operations, within about 1 ulp: x = n ln2 + r with
// |r| <= ln2 / 2 (n rounded by the 1.5 * 2^23 trick, ln2 in two parts so that n * hi is
// exact), e^r by a degree-7 minimax polynomial (Cephes' expf coefficients), times 2^n
// built in the exponent bits. 0 below -87, where e^x leaves the normal floats.
inline float exp_nonpositive(float x) {
    if (x != x) {
        return x;
    }
    if (x < -87.0f) {
        return 0.0f;
    }
    const float round = 12582912.0f;
    const float n = (x * 1.44269504088896341f + round) - round;
    const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float e_r = ((p * (r * r)) + r) + 1.0f;
    const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
    float two_n = 0.0f;
    std::memcpy(&two_n, &bits, sizeof(two_n));
    return e_r * two_n;
}

// One thread's working rows: a key converted to F32, a tile's values of one channel,
// the tile's scores and weights, the accumulator.
struct Scratch {
    std::vector<float> key, values, acc;
    float score[k_attention_tile], weight[k_attention_tile];
    bool keep[k_attention_tile];
};

// One query row of one head over its keys (see own_attention.h).
// k: key j's values at k + j * k_stride; v: channel d's values of every key at v + d * v_stride.
void attend_row(const float * q, const char * k, size_t k_stride, const char * v, size_t v_stride, const float * mask,
                int64_t n_kv, int64_t head, float kq_scale, Scratch & s, float * out) {
    float max = k_minus_inf, sum = 0.0f;
    std::fill(s.acc.begin(), s.acc.end(), 0.0f);
    for (int64_t j0 = 0; j0 < n_kv; j0 += k_attention_tile) {
        const int64_t n = std::min(k_attention_tile, n_kv - j0);
        int64_t kept = 0;
        float tile_max = k_minus_inf;
        for (int64_t j = 0; j < n; ++j) {
            s.keep[j] = mask[j0 + j] != k_minus_inf;
            if (!s.keep[j]) {
                continue;
            }
            ggml_cpu_fp16_to_fp32(reinterpret_cast<const ggml_fp16_t *>(k + (j0 + j) * k_stride), s.key.data(), head);
            s.score[j] = kq_scale * dot_lanes(q, s.key.data(), head) + mask[j0 + j];
            tile_max = s.score[j] > tile_max ? s.score[j] : tile_max;
            ++kept;
        }
        if (kept == 0) {
            continue;
        }
        if (tile_max > max) {   // e^(max - tile_max) is 0 at the first kept tile
            const float factor = exp_nonpositive(max - tile_max);
            sum = sum * factor;
            for (int64_t d = 0; d < head; ++d) {
                s.acc[d] = s.acc[d] * factor;
            }
            max = tile_max;
        }
        for (int64_t j = 0; j < n; ++j) {
            if (s.keep[j]) {
                s.weight[j] = exp_nonpositive(s.score[j] - max);
                sum = sum + s.weight[j];
            }
        }
        // acc[d] += the tile's weighted values of channel d, key j into lane j % 8
        const bool full = kept == k_attention_tile;
        for (int64_t d = 0; d < head; ++d) {
            ggml_cpu_fp16_to_fp32(reinterpret_cast<const ggml_fp16_t *>(v + d * v_stride) + j0, s.values.data(), n);
            float lanes[k_lanes] = {};
            if (full) {   // the same sums as below, where every key is kept
                for (int64_t j = 0; j < k_attention_tile; j += k_lanes) {
                    for (int l = 0; l < k_lanes; ++l) {
                        lanes[l] = lanes[l] + s.weight[j + l] * s.values[j + l];
                    }
                }
            } else {
                for (int64_t j = 0; j < n; ++j) {
                    if (s.keep[j]) {
                        lanes[j % k_lanes] = lanes[j % k_lanes] + s.weight[j] * s.values[j];
                    }
                }
            }
            s.acc[d] = s.acc[d] + sum_lanes(lanes);
        }
    }
    for (int64_t d = 0; d < head; ++d) {
        out[d] = sum > 0.0f ? s.acc[d] / sum : 0.0f;   // a row with every key masked: 0
    }
}

// Threads take contiguous ranges of (row, head) pairs; each pair is computed alone, so
// neither nth nor the pairs beside it change a bit.
void attention_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const float kq_scale = *static_cast<const float *>(userdata);
    const ggml_tensor * q = dst->src[0];
    const ggml_tensor * k = dst->src[1];
    const ggml_tensor * v = dst->src[2];
    const ggml_tensor * mask = dst->src[3];
    const int64_t head = q->ne[0], n_head = q->ne[1], n_tokens = q->ne[2];
    const int64_t n_kv = k->ne[1], group = n_head / k->ne[2];
    thread_local Scratch scratch;
    scratch.key.resize(static_cast<size_t>(head));
    scratch.acc.resize(static_cast<size_t>(head));
    scratch.values.resize(k_attention_tile);
    const int64_t pairs = n_tokens * n_head;
    for (int64_t i = pairs * ith / nth; i < pairs * (ith + 1) / nth; ++i) {
        const int64_t t = i / n_head, h = i % n_head, hk = h / group;
        attend_row(reinterpret_cast<const float *>(static_cast<const char *>(q->data) + t * q->nb[2] + h * q->nb[1]),
                   static_cast<const char *>(k->data) + hk * k->nb[2], k->nb[1],
                   static_cast<const char *>(v->data) + hk * v->nb[2], v->nb[1],
                   reinterpret_cast<const float *>(static_cast<const char *>(mask->data) + t * mask->nb[1]), n_kv, head,
                   kq_scale, scratch,
                   reinterpret_cast<float *>(static_cast<char *>(dst->data) + t * dst->nb[1]) + h * head);
    }
}

}  // namespace

bool own_attention_supports(const ggml_tensor * cache_k, const ggml_tensor * cache_v, int64_t head) {
    return cache_k->type == GGML_TYPE_F16 && cache_v->type == GGML_TYPE_F16 && head % k_lanes == 0 && cache_k->buffer &&
           ggml_backend_buffer_is_host(cache_k->buffer) && cache_v->buffer &&
           ggml_backend_buffer_is_host(cache_v->buffer);
}

ggml_tensor * own_attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * mask,
                            const float * kq_scale) {
    const int64_t head = q->ne[0], n_head = q->ne[1], n_tokens = q->ne[2], n_kv = k->ne[1], n_head_kv = k->ne[2];
    const bool fits = q->type == GGML_TYPE_F32 && q->nb[0] == sizeof(float) && q->ne[3] == 1 &&
                      k->type == GGML_TYPE_F16 && k->nb[0] == ggml_type_size(k->type) && k->ne[0] == head &&
                      v->type == GGML_TYPE_F16 && v->nb[0] == ggml_type_size(v->type) && v->ne[0] == n_kv &&
                      v->ne[1] == head && v->ne[2] == n_head_kv && n_head_kv > 0 && n_head % n_head_kv == 0 &&
                      head % k_lanes == 0 && mask && mask->type == GGML_TYPE_F32 && mask->nb[0] == sizeof(float) &&
                      mask->ne[0] == n_kv && mask->ne[1] == n_tokens;
    if (!fits) {
        throw Error(std::string("own_attention cannot attend with ") + ggml_get_name(q) + " over " + ggml_get_name(k) +
                    " and " + ggml_get_name(v));
    }
    ggml_tensor * args[] = {q, k, v, mask};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, head * n_head, n_tokens, 1, 1, args, 4, attention_op, GGML_N_TASKS_MAX,
                          const_cast<float *>(kq_scale));
}

}  // namespace river
