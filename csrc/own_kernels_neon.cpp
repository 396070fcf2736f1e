// own_quant.h's kernels for Arm with NEON and the dot-product extension (Armv8.2's sdot:
// Apple M1 and later, Neoverse N1 and later). Lanes are rows: a row group's 8 rows are
// two int32x4 halves (rows 0-3, 4-7); a 16-byte half of a slot holds 4 rows x 4 values,
// which one sdot multiplies by 4 values of a column. The integer sums are exact and the
// float steps are the reference's fused multiply-adds in its order: the reference's bits.
// Built for aarch64 where the compiler reaches sdot without a flag (GCC, clang 16 and
// later, or a target that has it, as Apple's); elsewhere there is no table.
#include "own_kernels.h"

#if defined(__aarch64__) && (defined(__ARM_FEATURE_DOTPROD) || !defined(__clang__) || __clang_major__ >= 16)
#include <arm_neon.h>

#include <cstring>

namespace river::own {

// The kernels use the dot-product instructions without a compiler flag, so that one build
// serves every aarch64 CPU: own_kernels.cpp offers them only where the CPU has them, and
// neon_kernels() below, which every CPU calls, is compiled for plain Armv8. (GCC's
// arm_neon.h declares sdot for Armv8.2 with DotProd; a caller must target at least that.)
#if !defined(__ARM_FEATURE_DOTPROD)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("dotprod"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
#endif
#endif

namespace {

// Columns per tile: with 8 rows in two halves, a column's sums take twice the registers
// they take on x86, and 2 columns plus a tile's slot values fill the 32 registers.
constexpr int k_max_cols = 2;

// 4 consecutive slots (128 bytes): slot i's rows 0-3 in v[2i], rows 4-7 in v[2i + 1]
inline void load_slots4(const uint8_t * p, uint8x16_t (&v)[8]) {
    for (int i = 0; i < 8; ++i) {
        v[i] = vld1q_u8(p + 16 * i);
    }
}

// t += 4 slots' values (as load_slots4 holds them) . a column's 16 bytes at x: slot i
// meets the column's bytes 4i .. 4i + 3, lane i of x. Lane numbers must be constants.
inline void dot4(int32x4_t (&t)[2], const uint8x16_t (&w)[8], const uint8_t * x) {
    const int8x16_t c = vld1q_s8(reinterpret_cast<const int8_t *>(x));
    t[0] = vdotq_laneq_s32(t[0], vreinterpretq_s8_u8(w[0]), c, 0);
    t[1] = vdotq_laneq_s32(t[1], vreinterpretq_s8_u8(w[1]), c, 0);
    t[0] = vdotq_laneq_s32(t[0], vreinterpretq_s8_u8(w[2]), c, 1);
    t[1] = vdotq_laneq_s32(t[1], vreinterpretq_s8_u8(w[3]), c, 1);
    t[0] = vdotq_laneq_s32(t[0], vreinterpretq_s8_u8(w[4]), c, 2);
    t[1] = vdotq_laneq_s32(t[1], vreinterpretq_s8_u8(w[5]), c, 2);
    t[0] = vdotq_laneq_s32(t[0], vreinterpretq_s8_u8(w[6]), c, 3);
    t[1] = vdotq_laneq_s32(t[1], vreinterpretq_s8_u8(w[7]), c, 3);
}

inline uint8x16_t low_nibbles(uint8x16_t v) {
    return vandq_u8(v, vdupq_n_u8(0x0F));
}
inline uint8x16_t high_nibbles(uint8x16_t v) {
    return vshrq_n_u8(v, 4);
}

inline float column_float(const uint8_t * p) {
    float v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline int32_t column_int(const uint8_t * p) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline int16_t column_int16(const uint8_t * p) {
    int16_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// 8 rows' f16 scales as floats (exact)
inline void row_scales(const uint8_t * p, float32x4_t (&d)[2]) {
    const float16x8_t h = vreinterpretq_f16_u8(vld1q_u8(p));
    d[0] = vcvt_f32_f16(vget_low_f16(h));
    d[1] = vcvt_high_f32_f16(h);
}

inline void row_u8(const uint8_t * p, int32x4_t (&v)[2]) {
    const uint16x8_t w = vmovl_u8(vld1_u8(p));
    v[0] = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(w)));
    v[1] = vreinterpretq_s32_u32(vmovl_high_u16(w));
}

inline void row_i8(const uint8_t * p, int32x4_t (&v)[2]) {
    const int16x8_t w = vmovl_s8(vld1_s8(reinterpret_cast<const int8_t *>(p)));
    v[0] = vmovl_s16(vget_low_s16(w));
    v[1] = vmovl_high_s16(w);
}

inline void set_zero(int32x4_t (&t)[2]) {
    t[0] = vdupq_n_s32(0);
    t[1] = vdupq_n_s32(0);
}

// acc + (row scale x column scale) x isum: the product rounded, then one fused
// multiply-add, as the reference's fmaf(d_row * d_col, isum, acc)
inline void add_block(float32x4_t (&acc)[2], const float32x4_t (&d)[2], float dx, const int32x4_t (&isum)[2]) {
    for (int h = 0; h < 2; ++h) {
        acc[h] = vfmaq_f32(acc[h], vmulq_n_f32(d[h], dx), vcvtq_f32_s32(isum[h]));
    }
}

template <int C>
inline void start(float32x4_t (&acc)[C][2]) {
    for (int c = 0; c < C; ++c) {
        acc[c][0] = vdupq_n_f32(0.0f);
        acc[c][1] = vdupq_n_f32(0.0f);
    }
}

template <int C>
inline void store(const float32x4_t (&acc)[C][2], float * out, size_t out_stride) {
    for (int c = 0; c < C; ++c) {
        vst1q_f32(out + c * out_stride, acc[c][0]);
        vst1q_f32(out + c * out_stride + 4, acc[c][1]);
    }
}

// Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL (own_quant.h's Group32): the nibbles, with the fifth
// bits, IQ4_NL's table (a tbl lookup: sdot multiplies signed bytes), the offset and the
// min's term as the type has them.
template <typename Group>
struct Block32 {
    template <int C>
    static void tile(const uint8_t * w, const uint8_t * x, size_t col_bytes, int64_t n_blocks, float * out,
                     size_t out_stride) {
        float32x4_t acc[C][2];
        start(acc);
        for (int64_t b = 0; b < n_blocks; ++b, w += Group::bytes, x += k_act32_bytes) {
            uint8x16_t q[8], lo[8], hi[8];
            load_slots4(w + Group::qs, q);
            for (int i = 0; i < 8; ++i) {
                lo[i] = low_nibbles(q[i]);
                hi[i] = high_nibbles(q[i]);
            }
            if constexpr (Group::fifth_bit) {
                // slot g = i / 2 (rows 0-3 or 4-7 by i % 2): bits g and 4 + g of its qh bytes
                const uint8x16_t bits[2] = {vld1q_u8(w + Group::qh), vld1q_u8(w + Group::qh + 16)};
                const uint8x16_t sixteen = vdupq_n_u8(16);
                for (int i = 0; i < 8; ++i) {
                    const uint8x16_t bit_lo = vdupq_n_u8(static_cast<uint8_t>(1 << (i / 2)));
                    const uint8x16_t bit_hi = vdupq_n_u8(static_cast<uint8_t>(1 << (4 + i / 2)));
                    lo[i] = vorrq_u8(lo[i], vandq_u8(vtstq_u8(bits[i % 2], bit_lo), sixteen));
                    hi[i] = vorrq_u8(hi[i], vandq_u8(vtstq_u8(bits[i % 2], bit_hi), sixteen));
                }
            }
            if constexpr (Group::table) {
                const uint8x16_t table = vreinterpretq_u8_s8(vld1q_s8(k_iq4_values));
                for (int i = 0; i < 8; ++i) {
                    lo[i] = vqtbl1q_u8(table, lo[i]);
                    hi[i] = vqtbl1q_u8(table, hi[i]);
                }
            }
            float32x4_t d[2], m[2];
            row_scales(w + Group::d, d);
            if constexpr (Group::has_min) {
                row_scales(w + Group::m, m);
            }
            for (int c = 0; c < C; ++c) {
                const uint8_t * xc = x + c * col_bytes;
                const int32_t sum = column_int(xc + k_act32_sum);
                const float dx = column_float(xc + k_act32_d);
                // start from -offset x the column's sum
                const int32x4_t offset = vdupq_n_s32(-Group::offset * sum);
                int32x4_t t[2] = {offset, offset};
                dot4(t, lo, xc);
                dot4(t, hi, xc + 16);
                add_block(acc[c], d, dx, t);
                if constexpr (Group::has_min) {
                    // + (m x dx) x column sum, fused, after the scale's term
                    for (int h = 0; h < 2; ++h) {
                        acc[c][h] = vfmaq_f32(acc[c][h], vmulq_n_f32(m[h], dx), vdupq_n_f32(static_cast<float>(sum)));
                    }
                }
            }
        }
        store(acc, out, out_stride);
    }
};

struct Q8_0 {
    template <int C>
    static void tile(const uint8_t * w, const uint8_t * x, size_t col_bytes, int64_t n_blocks, float * out,
                     size_t out_stride) {
        float32x4_t acc[C][2];
        start(acc);
        for (int64_t b = 0; b < n_blocks; ++b, w += group_q8_0::bytes, x += k_act32_bytes) {
            uint8x16_t first[8], second[8];   // slots 0-3 and 4-7: signed values, as they are
            load_slots4(w + group_q8_0::qs, first);
            load_slots4(w + group_q8_0::qs + 4 * k_slot, second);
            float32x4_t d[2];
            row_scales(w + group_q8_0::d, d);
            for (int c = 0; c < C; ++c) {
                const uint8_t * xc = x + c * col_bytes;
                int32x4_t t[2];
                set_zero(t);
                dot4(t, first, xc);
                dot4(t, second, xc + 16);
                add_block(acc[c], d, column_float(xc + k_act32_d), t);
            }
        }
        store(acc, out, out_stride);
    }
};

// Q4_K and Q5_K: 8 sub-blocks of 32 with a 6-bit scale and min each; Q5_K adds each
// value's fifth bit from its qh slots.
template <bool five_bits>
struct QK_4_5 {
    template <int C>
    static void tile(const uint8_t * w, const uint8_t * x, size_t col_bytes, int64_t n_blocks, float * out,
                     size_t out_stride) {
        constexpr size_t bytes = five_bits ? group_q5_K::bytes : group_q4_K::bytes;
        constexpr size_t scales = five_bits ? group_q5_K::scales : group_q4_K::scales;
        constexpr size_t mins = five_bits ? group_q5_K::mins : group_q4_K::mins;
        constexpr size_t d_at = five_bits ? group_q5_K::d : group_q4_K::d;
        constexpr size_t dmin_at = five_bits ? group_q5_K::dmin : group_q4_K::dmin;
        float32x4_t acc[C][2];
        start(acc);
        for (int64_t b = 0; b < n_blocks; ++b, w += bytes, x += k_act256_bytes) {
            int32x4_t isum[C][2], msum[C][2];
            for (int c = 0; c < C; ++c) {
                set_zero(isum[c]);
                set_zero(msum[c]);
            }
            // chunk j: sub-blocks 2j (low nibbles) and 2j + 1 (high), 8 slots in two halves of 4
            for (int j = 0; j < 4; ++j) {
                int32x4_t t_lo[C][2], t_hi[C][2];
                for (int c = 0; c < C; ++c) {
                    set_zero(t_lo[c]);
                    set_zero(t_hi[c]);
                }
                for (int half = 0; half < 2; ++half) {
                    uint8x16_t q[8], lo[8], hi[8];
                    load_slots4(w + (j * 8 + 4 * half) * k_slot, q);
                    for (int i = 0; i < 8; ++i) {
                        lo[i] = low_nibbles(q[i]);
                        hi[i] = high_nibbles(q[i]);
                    }
                    if constexpr (five_bits) {
                        uint8x16_t bits[8];
                        load_slots4(w + group_q5_K::qh + 4 * half * k_slot, bits);
                        const uint8x16_t bit_lo = vdupq_n_u8(static_cast<uint8_t>(1 << (2 * j)));
                        const uint8x16_t bit_hi = vdupq_n_u8(static_cast<uint8_t>(1 << (2 * j + 1)));
                        const uint8x16_t sixteen = vdupq_n_u8(16);
                        for (int i = 0; i < 8; ++i) {
                            lo[i] = vorrq_u8(lo[i], vandq_u8(vtstq_u8(bits[i], bit_lo), sixteen));
                            hi[i] = vorrq_u8(hi[i], vandq_u8(vtstq_u8(bits[i], bit_hi), sixteen));
                        }
                    }
                    for (int c = 0; c < C; ++c) {
                        const uint8_t * xc = x + c * col_bytes + 64 * j + 16 * half;
                        dot4(t_lo[c], lo, xc);
                        dot4(t_hi[c], hi, xc + 32);
                    }
                }
                int32x4_t sc_lo[2], sc_hi[2];
                row_u8(w + scales + (2 * j) * 8, sc_lo);
                row_u8(w + scales + (2 * j + 1) * 8, sc_hi);
                for (int c = 0; c < C; ++c) {
                    for (int h = 0; h < 2; ++h) {
                        isum[c][h] = vmlaq_s32(vmlaq_s32(isum[c][h], t_lo[c][h], sc_lo[h]), t_hi[c][h], sc_hi[h]);
                    }
                }
            }
            // the mins x the column's sums of 32: a pair of sub-blocks' mins interleaved
            // per row, which vld2 parts into sub-block 2i's 8 rows and 2i + 1's
            for (int i = 0; i < 4; ++i) {
                const uint8x8x2_t m = vld2_u8(w + mins + 16 * i);
                const int16x8_t m_even = vreinterpretq_s16_u16(vmovl_u8(m.val[0]));
                const int16x8_t m_odd = vreinterpretq_s16_u16(vmovl_u8(m.val[1]));
                for (int c = 0; c < C; ++c) {
                    const uint8_t * sums = x + c * col_bytes + k_act256_sum32 + 4 * i;
                    const int16_t s_even = column_int16(sums), s_odd = column_int16(sums + 2);
                    msum[c][0] = vmlal_n_s16(msum[c][0], vget_low_s16(m_even), s_even);
                    msum[c][1] = vmlal_high_n_s16(msum[c][1], m_even, s_even);
                    msum[c][0] = vmlal_n_s16(msum[c][0], vget_low_s16(m_odd), s_odd);
                    msum[c][1] = vmlal_high_n_s16(msum[c][1], m_odd, s_odd);
                }
            }
            float32x4_t d[2], dmin[2];
            row_scales(w + d_at, d);
            row_scales(w + dmin_at, dmin);
            for (int c = 0; c < C; ++c) {
                const float dx = column_float(x + c * col_bytes + k_act256_d);
                add_block(acc[c], d, dx, isum[c]);
                // acc - (dmin x dx) x msum, fused: the reference's fmaf(-(dmin * dx), msum, acc)
                for (int h = 0; h < 2; ++h) {
                    acc[c][h] = vfmsq_f32(acc[c][h], vmulq_n_f32(dmin[h], dx), vcvtq_f32_s32(msum[c][h]));
                }
            }
        }
        store(acc, out, out_stride);
    }
};

// Q6_K's values of sub-block k + 4s in slots h = 4k .. 4k + 3 (as load_slots4 holds
// them): the low or high nibbles (s < 2 or not) of low slot h or h + 16 (s even or odd),
// with bits 2s and 2s + 1 of top slot h as bits 4 and 5.
inline void q6_values(const uint8_t * w, int k, int s, uint8x16_t (&q)[8]) {
    const int8x16_t top_shift = vdupq_n_s8(static_cast<int8_t>(4 - 2 * s));   // negative: to the right
    for (int i = 0; i < 4; ++i) {
        const int h = 4 * k + i;
        for (int half = 0; half < 2; ++half) {
            const uint8x16_t low = vld1q_u8(w + group_q6_K::low_slot(h + 16 * (s % 2)) + 16 * half);
            const uint8x16_t top = vld1q_u8(w + group_q6_K::top_slot(h) + 16 * half);
            const uint8x16_t nibbles = s < 2 ? low_nibbles(low) : high_nibbles(low);
            q[2 * i + half] = vorrq_u8(nibbles, vandq_u8(vshlq_u8(top, top_shift), vdupq_n_u8(0x30)));
        }
    }
}

struct Q6_K {
    template <int C>
    static void tile(const uint8_t * w, const uint8_t * x, size_t col_bytes, int64_t n_blocks, float * out,
                     size_t out_stride) {
        float32x4_t acc[C][2];
        start(acc);
        for (int64_t b = 0; b < n_blocks; ++b, w += group_q6_K::bytes, x += k_act256_bytes) {
            int32x4_t isum[C][2];
            for (int c = 0; c < C; ++c) {
                set_zero(isum[c]);
            }
            for (int k = 0; k < 4; ++k) {
                for (int s = 0; s < 4; ++s) {
                    const int sub = k + 4 * s;   // values 16 sub ..: the column's bytes 16k + 64s ..
                    uint8x16_t q[8];
                    q6_values(w, k, s, q);
                    int32x4_t sc[2];
                    row_i8(w + group_q6_K::scales + sub * 8, sc);
                    for (int c = 0; c < C; ++c) {
                        const uint8_t * xc = x + c * col_bytes;
                        // the values are those - 32: start from -32 x the column's sum
                        const int32x4_t offset = vdupq_n_s32(-column_int(xc + k_act256_sum16x32 + 4 * sub));
                        int32x4_t t[2] = {offset, offset};
                        dot4(t, q, xc + 16 * k + 64 * s);
                        for (int h = 0; h < 2; ++h) {
                            isum[c][h] = vmlaq_s32(isum[c][h], t[h], sc[h]);
                        }
                    }
                }
            }
            float32x4_t d[2];
            row_scales(w + group_q6_K::d, d);
            for (int c = 0; c < C; ++c) {
                add_block(acc[c], d, column_float(x + c * col_bytes + k_act256_d), isum[c]);
            }
        }
        store(acc, out, out_stride);
    }
};

// ---- Q3_K, Q2_K and IQ4_XS ----

// Q3_K and Q2_K (as own_kernels_x86.inc's QK_2_3): sub-block s's 16 values from qs slot
// s, whose bit pair k holds values 16s + 4k..: the 4 pairs are 4 slots' values as
// load_slots4 holds them. Q3_K adds the third bits from its hmask slots, values offset by
// -4 and signed scales; Q2_K has GGUF's byte of a 4-bit scale and min per sub-block.
template <bool three_bits>
struct QK_2_3 {
    template <int C>
    static void tile(const uint8_t * w, const uint8_t * x, size_t col_bytes, int64_t n_blocks, float * out,
                     size_t out_stride) {
        constexpr size_t bytes = three_bits ? group_q3_K::bytes : group_q2_K::bytes;
        constexpr size_t scales = three_bits ? group_q3_K::scales : group_q2_K::scales;
        constexpr size_t d_at = three_bits ? group_q3_K::d : group_q2_K::d;
        float32x4_t acc[C][2];
        start(acc);
        for (int64_t b = 0; b < n_blocks; ++b, w += bytes, x += k_act256_bytes) {
            int32x4_t isum[C][2], msum[C][2];
            for (int c = 0; c < C; ++c) {
                set_zero(isum[c]);
                set_zero(msum[c]);
            }
            for (int s = 0; s < 16; ++s) {
                uint8x16_t q[8];
                for (int half = 0; half < 2; ++half) {
                    const uint8x16_t packed = vld1q_u8(w + s * k_slot + 16 * half);
                    const uint8x16_t high =   // Q3_K's third bits
                        three_bits ? vld1q_u8(w + group_q3_K::hmask + (s / 2) * k_slot + 16 * half) : vdupq_n_u8(0);
                    for (int k = 0; k < 4; ++k) {
                        uint8x16_t v =
                            vandq_u8(vshlq_u8(packed, vdupq_n_s8(static_cast<int8_t>(-2 * k))), vdupq_n_u8(3));
                        if constexpr (three_bits) {
                            const uint8x16_t bit = vdupq_n_u8(static_cast<uint8_t>(1 << (4 * (s % 2) + k)));
                            v = vorrq_u8(v, vandq_u8(vtstq_u8(high, bit), vdupq_n_u8(4)));
                        }
                        q[2 * k + half] = v;
                    }
                }
                int32x4_t sc[2], m[2];   // m: Q2_K's mins
                if constexpr (three_bits) {
                    row_i8(w + scales + s * 8, sc);
                } else {
                    row_u8(w + scales + s * 8, m);
                    for (int h = 0; h < 2; ++h) {
                        sc[h] = vandq_s32(m[h], vdupq_n_s32(15));
                        m[h] = vshrq_n_s32(m[h], 4);
                    }
                }
                for (int c = 0; c < C; ++c) {
                    const uint8_t * xc = x + c * col_bytes;
                    const int32_t sum = column_int(xc + k_act256_sum16x32 + 4 * s);   // 32 x the column's sum of 16
                    // Q3_K's values are those - 4: start from -4 x the column's sum
                    const int32x4_t offset = vdupq_n_s32(three_bits ? -(sum / 8) : 0);
                    int32x4_t t[2] = {offset, offset};
                    dot4(t, q, xc + 16 * s);
                    for (int h = 0; h < 2; ++h) {
                        isum[c][h] = vmlaq_s32(isum[c][h], t[h], sc[h]);
                        if constexpr (!three_bits) {
                            msum[c][h] = vmlaq_n_s32(msum[c][h], m[h], sum / 32);
                        }
                    }
                }
            }
            float32x4_t d[2];
            row_scales(w + d_at, d);
            for (int c = 0; c < C; ++c) {
                const float dx = column_float(x + c * col_bytes + k_act256_d);
                add_block(acc[c], d, dx, isum[c]);
                if constexpr (!three_bits) {
                    // acc - (dmin x dx) x msum, fused: the reference's fmaf(-(dmin * dx), msum, acc)
                    float32x4_t dmin[2];
                    row_scales(w + group_q2_K::dmin, dmin);
                    for (int h = 0; h < 2; ++h) {
                        acc[c][h] = vfmsq_f32(acc[c][h], vmulq_n_f32(dmin[h], dx), vcvtq_f32_s32(msum[c][h]));
                    }
                }
            }
        }
        store(acc, out, out_stride);
    }
};

// IQ4_XS: Q4_K's nibbles, each an index into k_iq4_values (tbl), 8 sub-blocks of 32 with
// a signed scale each; sdot multiplies the signed values as they are.
struct IQ4_XS {
    template <int C>
    static void tile(const uint8_t * w, const uint8_t * x, size_t col_bytes, int64_t n_blocks, float * out,
                     size_t out_stride) {
        const uint8x16_t grid = vreinterpretq_u8_s8(vld1q_s8(k_iq4_values));
        float32x4_t acc[C][2];
        start(acc);
        for (int64_t b = 0; b < n_blocks; ++b, w += group_iq4_xs::bytes, x += k_act256_bytes) {
            int32x4_t isum[C][2];
            for (int c = 0; c < C; ++c) {
                set_zero(isum[c]);
            }
            // chunk j: sub-blocks 2j (low nibbles) and 2j + 1 (high), 8 slots in two halves of 4
            for (int j = 0; j < 4; ++j) {
                int32x4_t t_lo[C][2], t_hi[C][2];
                for (int c = 0; c < C; ++c) {
                    set_zero(t_lo[c]);
                    set_zero(t_hi[c]);
                }
                for (int half = 0; half < 2; ++half) {
                    uint8x16_t q[8], lo[8], hi[8];
                    load_slots4(w + group_iq4_xs::qs + (j * 8 + 4 * half) * k_slot, q);
                    for (int i = 0; i < 8; ++i) {
                        lo[i] = vqtbl1q_u8(grid, low_nibbles(q[i]));
                        hi[i] = vqtbl1q_u8(grid, high_nibbles(q[i]));
                    }
                    for (int c = 0; c < C; ++c) {
                        const uint8_t * xc = x + c * col_bytes + 64 * j + 16 * half;
                        dot4(t_lo[c], lo, xc);
                        dot4(t_hi[c], hi, xc + 32);
                    }
                }
                int32x4_t sc_lo[2], sc_hi[2];
                row_i8(w + group_iq4_xs::scales + (2 * j) * 8, sc_lo);
                row_i8(w + group_iq4_xs::scales + (2 * j + 1) * 8, sc_hi);
                for (int c = 0; c < C; ++c) {
                    for (int h = 0; h < 2; ++h) {
                        isum[c][h] = vmlaq_s32(vmlaq_s32(isum[c][h], t_lo[c][h], sc_lo[h]), t_hi[c][h], sc_hi[h]);
                    }
                }
            }
            float32x4_t d[2];
            row_scales(w + group_iq4_xs::d, d);
            for (int c = 0; c < C; ++c) {
                add_block(acc[c], d, column_float(x + c * col_bytes + k_act256_d), isum[c]);
            }
        }
        store(acc, out, out_stride);
    }
};

// n_groups row groups times n_cols columns: each group alone (the sdot by lane already
// reads a column's 16 bytes once per 4 slots), in tiles of k_max_cols columns, then the rest.
template <typename Type>
void group_kernel(const uint8_t * groups, size_t group_stride, int n_groups, const uint8_t * cols, size_t col_bytes,
                  int64_t n_blocks, int64_t n_cols, float * out, size_t out_stride) {
    for (int gi = 0; gi < n_groups; ++gi) {
        const uint8_t * group = groups + gi * group_stride;
        float * group_out = out + gi * k_group_rows;
        int64_t c = 0;
        for (; c + k_max_cols <= n_cols; c += k_max_cols) {
            Type::template tile<k_max_cols>(group, cols + c * col_bytes, col_bytes, n_blocks,
                                            group_out + c * out_stride, out_stride);
        }
        for (; c < n_cols; ++c) {
            Type::template tile<1>(group, cols + c * col_bytes, col_bytes, n_blocks, group_out + c * out_stride,
                                   out_stride);
        }
    }
}

}  // namespace

#if !defined(__ARM_FEATURE_DOTPROD)
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

const Kernels * neon_kernels() {
    static const Kernels kernels{"neon",
                                 group_kernel<Block32<group_q4_0>>,
                                 group_kernel<Q8_0>,
                                 group_kernel<QK_4_5<false>>,
                                 group_kernel<QK_4_5<true>>,
                                 group_kernel<Q6_K>,
                                 group_kernel<Block32<group_q4_1>>,
                                 group_kernel<Block32<group_q5_0>>,
                                 group_kernel<Block32<group_q5_1>>,
                                 group_kernel<Block32<group_iq4_nl>>,
                                 group_kernel<QK_2_3<true>>,
                                 group_kernel<QK_2_3<false>>,
                                 group_kernel<IQ4_XS>};
    return &kernels;
}

}  // namespace river::own
#else
namespace river::own {
const Kernels * neon_kernels() {
    return nullptr;
}
}  // namespace river::own
#endif
