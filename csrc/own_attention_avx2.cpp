// Our own attention's block kernel for x86 with AVX2 and F16C (own_attention_rows.inc):
// the baseline's operations, 8 lanes to a register.
#include "own_attention_rows.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include <cstring>

#include "ggml.h"

namespace river {
namespace {

// y[c * y_stride + r] = x[r * x_stride + c] in F32, r < rows, c < cols: 8 x 8 blocks
// converted in registers and transposed there, the edges one value at a time.
inline void to_f32_transposed(const ggml_fp16_t * x, size_t x_stride, int64_t rows, int64_t cols, float * y,
                              size_t y_stride) {
    const int64_t rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
    for (int64_t r = 0; r < rows8; r += 8) {
        for (int64_t c = 0; c < cols8; c += 8) {
            __m256 a[8], b[8];
            for (int i = 0; i < 8; ++i) {
                a[i] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + (r + i) * x_stride + c)));
            }
            for (int i = 0; i < 8; i += 2) {
                b[i] = _mm256_unpacklo_ps(a[i], a[i + 1]);
                b[i + 1] = _mm256_unpackhi_ps(a[i], a[i + 1]);
            }
            for (int i = 0; i < 8; i += 4) {
                a[i] = _mm256_shuffle_ps(b[i], b[i + 2], 0x44);
                a[i + 1] = _mm256_shuffle_ps(b[i], b[i + 2], 0xee);
                a[i + 2] = _mm256_shuffle_ps(b[i + 1], b[i + 3], 0x44);
                a[i + 3] = _mm256_shuffle_ps(b[i + 1], b[i + 3], 0xee);
            }
            for (int i = 0; i < 4; ++i) {
                _mm256_storeu_ps(y + (c + i) * y_stride + r, _mm256_permute2f128_ps(a[i], a[i + 4], 0x20));
                _mm256_storeu_ps(y + (c + i + 4) * y_stride + r, _mm256_permute2f128_ps(a[i], a[i + 4], 0x31));
            }
        }
    }
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = r < rows8 ? cols8 : 0; c < cols; ++c) {
            y[c * y_stride + r] = _cvtsh_ss(x[r * x_stride + c]);
        }
    }
}

// Row r's cols values of q8_0 blocks at x + r * x_stride, to y + r * y_stride in F32:
// 8 int8 values widened to floats in a register, times the block's scale.
inline void q8_0_to_f32(const char * x, size_t x_stride, int64_t rows, int64_t cols, float * y, size_t y_stride) {
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c0 = 0; c0 < cols; c0 += k_q8_0_values) {
            const char * block = x + r * x_stride + c0 / k_q8_0_values * sizeof(Q8Block);
            ggml_fp16_t d;
            std::memcpy(&d, block, sizeof(d));
            const __m256 scale = _mm256_set1_ps(_cvtsh_ss(d));
            for (int64_t i = 0; i < k_q8_0_values; i += 8) {
                const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(block + sizeof(d) + i));
                _mm256_storeu_ps(y + r * y_stride + c0 + i,
                                 _mm256_mul_ps(scale, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
            }
        }
    }
}

}  // namespace
}  // namespace river

#define OWN_ATTENTION_BLOCK attention_block_avx2_kernel
#include "own_attention_rows.inc"

namespace river {
const AttentionBlockKernel attention_block_avx2 = attention_block_avx2_kernel;
}  // namespace river
#else
namespace river {
const AttentionBlockKernel attention_block_avx2 = nullptr;
}  // namespace river
#endif
