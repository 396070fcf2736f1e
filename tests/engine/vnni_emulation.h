// Exact AVX2 stand-ins for the two AVX-512 VNNI instructions own_kernels_x86.inc uses, for
// test_own_kernels_vnni_emulated.py: force-included (g++ -include) into csrc/own_kernels_vnni.cpp
// compiled for AVX2, FMA and F16C alone, so that the VNNI kernels' source runs on any AVX2 CPU.
#pragma once

// first, so that the intrinsics' own declarations are read before the names below take them
#include <immintrin.h>

namespace river_test {

// vpdpbusd: acc + per 32-bit lane the 4 products of u's unsigned bytes by s's signed bytes
// in that lane, wrapping. The even and the odd bytes go to 16-bit lanes (u zero-extended, s
// sign-extended), where vpmaddwd's sums of two products (at most 2 x 255 x 128) are exact.
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) {
    const __m256i u_even = _mm256_and_si256(u, _mm256_set1_epi16(0x00FF)), u_odd = _mm256_srli_epi16(u, 8);
    const __m256i s_even = _mm256_srai_epi16(_mm256_slli_epi16(s, 8), 8), s_odd = _mm256_srai_epi16(s, 8);
    return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(u_even, s_even), _mm256_madd_epi16(u_odd, s_odd)));
}

// vpdpwssd: acc + per 32-bit lane the 2 products of its signed 16-bit pairs, wrapping, as
// vpmaddwd adds them (its one overflow, 2 x (-32768)^2, wraps as vpdpwssd's sum does).
inline __m256i dpwssd(__m256i acc, __m256i a, __m256i b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
}

}  // namespace river_test

// clang defines the intrinsics as macros, GCC as functions: either way these names win
#undef _mm256_dpbusd_epi32
#undef _mm256_dpwssd_epi32
#define _mm256_dpbusd_epi32 ::river_test::dpbusd
#define _mm256_dpwssd_epi32 ::river_test::dpwssd
