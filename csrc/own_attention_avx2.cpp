// Our own attention's row kernel for x86 with AVX2 and F16C (own_attention_rows.inc):
// the baseline's operations, 8 lanes to a register.
#include "own_attention_rows.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include "ggml.h"

namespace river {
namespace {

inline void to_f32(const ggml_fp16_t * x, float * y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + i))));
    }
    for (; i < n; ++i) {
        y[i] = _cvtsh_ss(x[i]);
    }
}

}  // namespace
}  // namespace river

#define OWN_ATTENTION_ROW attention_row_avx2_kernel
#include "own_attention_rows.inc"

namespace river {
const AttentionRow attention_row_avx2 = attention_row_avx2_kernel;
}  // namespace river
#else
namespace river {
const AttentionRow attention_row_avx2 = nullptr;
}  // namespace river
#endif
