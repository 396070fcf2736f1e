#include "own_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace river::own {

namespace {

// the GGUF block sizes: Q4_0 = f16 d + 16 bytes, Q8_0 = f16 d + 32, Q4_K = 2 f16 + 12 + 128,
// Q5_K = 2 f16 + 12 + 32 + 128, Q6_K = 128 + 64 + 16 + f16 d
const TypeLayout k_layouts[] = {
    {GGML_TYPE_Q4_0, 32, 18, group_q4_0::bytes, ActFormat::q8_32},
    {GGML_TYPE_Q8_0, 32, 34, group_q8_0::bytes, ActFormat::q8_32},
    {GGML_TYPE_Q4_K, 256, 144, group_q4_K::bytes, ActFormat::q8_256},
    {GGML_TYPE_Q5_K, 256, 176, group_q5_K::bytes, ActFormat::q8_256},
    {GGML_TYPE_Q6_K, 256, 210, group_q6_K::bytes, ActFormat::q8_256},
    // Q4_1 = 2 f16 + 16, Q5_0 = f16 + 4 + 16, Q5_1 = 2 f16 + 4 + 16, IQ4_NL = f16 + 16
    {GGML_TYPE_Q4_1, 32, 20, group_q4_1::bytes, ActFormat::q8_32},
    {GGML_TYPE_Q5_0, 32, 22, group_q5_0::bytes, ActFormat::q8_32},
    {GGML_TYPE_Q5_1, 32, 24, group_q5_1::bytes, ActFormat::q8_32},
    {GGML_TYPE_IQ4_NL, 32, 18, group_iq4_nl::bytes, ActFormat::q8_32},
    // Q3_K = 32 + 64 + 12 + f16 d, Q2_K = 16 + 64 + 2 f16, IQ4_XS = f16 d + 2 + 4 + 128
    {GGML_TYPE_Q3_K, 256, 110, group_q3_K::bytes, ActFormat::q8_256},
    {GGML_TYPE_Q2_K, 256, 84, group_q2_K::bytes, ActFormat::q8_256},
    {GGML_TYPE_IQ4_XS, 256, 136, group_iq4_xs::bytes, ActFormat::q8_256},
};

inline uint8_t & slot_byte(uint8_t * base, int64_t slot, int64_t r, int64_t b) {
    return base[slot * k_slot + r * 4 + b];
}
inline uint8_t slot_byte(const uint8_t * base, int64_t slot, int64_t r, int64_t b) {
    return base[slot * k_slot + r * 4 + b];
}

// An IEEE half as a float (exact; as F16C's vcvtph2ps and NEON's vcvt_f32_f16 convert).
// Written out, so that this file needs nothing of ggml but its type enum.
inline float f16(const uint8_t * p) {
    uint16_t h;
    std::memcpy(&h, p, sizeof h);
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
    float magnitude;
    if (exponent == 0) {
        magnitude = std::ldexp(static_cast<float>(mantissa), -24);   // subnormal (or zero)
    } else if (exponent == 31) {
        magnitude = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    } else {
        const uint32_t bits = ((exponent + 112) << 23) | (mantissa << 13);
        std::memcpy(&magnitude, &bits, sizeof magnitude);
    }
    uint32_t out;
    std::memcpy(&out, &magnitude, sizeof out);
    out |= sign;
    float value;
    std::memcpy(&value, &out, sizeof value);
    return value;
}

inline void put_f16(uint8_t * base, int64_t r, const uint8_t * ggml_half) {
    std::memcpy(base + r * 2, ggml_half, 2);
}

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K block's 12 packed bytes.
void scale_min_k4(int j, const uint8_t * q, uint8_t & sc, uint8_t & m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Row r's values of a Q4_K / Q5_K block into a row group block (bits 0..3 of each).
void put_nibbles_k(uint8_t * qs, int64_t r, const uint8_t * v) {
    for (int64_t j = 0; j < 4; ++j) {
        for (int64_t l = 0; l < 32; ++l) {
            slot_byte(qs, j * 8 + l / 4, r, l % 4) =
                static_cast<uint8_t>((v[64 * j + l] & 0xF) | ((v[64 * j + 32 + l] & 0xF) << 4));
        }
    }
}

void put_scales_k(uint8_t * group, size_t scales, size_t mins, int64_t r, const uint8_t * packed12) {
    for (int j = 0; j < 8; ++j) {
        scale_min_k4(j, packed12, group[scales + j * 8 + r], group[mins + group_q4_K::min_at(j, r)]);
    }
}

// Row r of a Group32 type's block: GGUF's d | m (with a min) | qh[4] (with a fifth bit) | qs[16].
template <typename Group>
void pack_row_32(const uint8_t * src, uint8_t * group, int64_t r) {
    put_f16(group + Group::d, r, src);
    src += 2;
    if constexpr (Group::has_min) {
        put_f16(group + Group::m, r, src);
        src += 2;
    }
    if constexpr (Group::fifth_bit) {
        // GGUF's qh: a little-endian 32-bit word whose bit i is value i's fifth bit
        const uint32_t qh = src[0] | (src[1] << 8) | (src[2] << 16) | (static_cast<uint32_t>(src[3]) << 24);
        for (int64_t b = 0; b < 4; ++b) {
            uint8_t bits = 0;
            for (int64_t g = 0; g < 4; ++g) {
                bits |= ((qh >> (4 * g + b)) & 1) << g;
                bits |= ((qh >> (16 + 4 * g + b)) & 1) << (4 + g);
            }
            slot_byte(group + Group::qh, 0, r, b) = bits;
        }
        src += 4;
    }
    for (int64_t l = 0; l < 16; ++l) {   // byte l: value l in its low nibble, 16 + l in its high
        slot_byte(group + Group::qs, l / 4, r, l % 4) = src[l];
    }
}

// ---- packing of the 256-value types of few bits: Q3_K, Q2_K, IQ4_XS ----

// Value i (0..255) of a Q2_K / Q3_K block's qs[64]: 2 bits of byte 32 (i / 128) + i % 32,
// the pair (i % 128) / 32.
inline uint8_t low2_k(const uint8_t * qs, int64_t i) {
    return (qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
}

// Row r's low 2 bits of each value v[i] into a row group block's qs slots (group_q2_K).
void put_low2_k(uint8_t * qs, int64_t r, const uint8_t * v) {
    for (int64_t s = 0; s < 16; ++s) {
        for (int64_t b = 0; b < 4; ++b) {
            uint8_t bits = 0;
            for (int64_t k = 0; k < 4; ++k) {
                bits |= (v[16 * s + 4 * k + b] & 3) << (2 * k);
            }
            slot_byte(qs, s, r, b) = bits;
        }
    }
}

void pack_q2_K_row(const uint8_t * src, uint8_t * group, int64_t r) {   // scales[16] | qs[64] | d | dmin
    uint8_t v[256];
    for (int64_t i = 0; i < 256; ++i) {
        v[i] = low2_k(src + 16, i);
    }
    put_low2_k(group + group_q2_K::qs, r, v);
    for (int64_t s = 0; s < 16; ++s) {
        group[group_q2_K::scales + s * 8 + r] = src[s];
    }
    put_f16(group + group_q2_K::d, r, src + 80);
    put_f16(group + group_q2_K::dmin, r, src + 82);
}

void pack_q3_K_row(const uint8_t * src, uint8_t * group, int64_t r) {   // hmask[32] | qs[64] | scales[12] | d
    uint8_t v[256];
    for (int64_t i = 0; i < 256; ++i) {
        // the third bit: bit i / 32 of hmask[i % 32]
        v[i] = low2_k(src + 32, i) | (((src[i % 32] >> (i / 32)) & 1) << 2);
    }
    put_low2_k(group + group_q3_K::qs, r, v);
    for (int64_t h = 0; h < 8; ++h) {
        for (int64_t b = 0; b < 4; ++b) {
            uint8_t bits = 0;
            for (int64_t k = 0; k < 8; ++k) {
                bits |= (v[16 * (2 * h + k / 4) + 4 * (k % 4) + b] >> 2) << k;
            }
            slot_byte(group + group_q3_K::hmask, h, r, b) = bits;
        }
    }
    // 16 scales of 6 bits: the low 4 in the nibbles of bytes 0..7 (sub-block s and s + 8),
    // the top 2 in bits 2(s / 4) of byte 8 + s % 4
    const uint8_t * sc = src + 96;
    for (int64_t s = 0; s < 16; ++s) {
        const int low = (s < 8 ? sc[s] : sc[s - 8] >> 4) & 0xF;
        const int high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
        group[group_q3_K::scales + s * 8 + r] = static_cast<uint8_t>(static_cast<int8_t>((low | (high << 4)) - 32));
    }
    put_f16(group + group_q3_K::d, r, src + 108);
}

void pack_iq4_xs_row(const uint8_t * src, uint8_t * group, int64_t r) {   // d | scales_h | scales_l[4] | qs[128]
    put_f16(group + group_iq4_xs::d, r, src);
    const int scales_h = src[2] | (src[3] << 8);
    for (int64_t j = 0; j < 8; ++j) {
        const int low = (src[4 + j / 2] >> (4 * (j % 2))) & 0xF;
        const int high = (scales_h >> (2 * j)) & 3;
        group[group_iq4_xs::scales + j * 8 + r] = static_cast<uint8_t>(static_cast<int8_t>((low | (high << 4)) - 32));
    }
    // sub-block j's 32 indices: the low nibbles of qs[16j ..], then the high ones
    uint8_t v[256];
    for (int64_t i = 0; i < 256; ++i) {
        const uint8_t byte = src[8 + 16 * (i / 32) + i % 16];
        v[i] = (i % 32) < 16 ? byte & 0xF : byte >> 4;
    }
    put_nibbles_k(group + group_iq4_xs::qs, r, v);
}

void pack_row(ggml_type type, const uint8_t * src, uint8_t * group, int64_t r) {
    uint8_t v[256];
    switch (type) {
        case GGML_TYPE_Q4_0: pack_row_32<group_q4_0>(src, group, r); break;
        case GGML_TYPE_Q8_0:   // d | qs[32]
            put_f16(group + group_q8_0::d, r, src);
            for (int64_t l = 0; l < 32; ++l) {
                slot_byte(group + group_q8_0::qs, l / 4, r, l % 4) = src[2 + l];
            }
            break;
        case GGML_TYPE_Q4_K:   // d | dmin | scales[12] | qs[128]
            put_f16(group + group_q4_K::d, r, src);
            put_f16(group + group_q4_K::dmin, r, src + 2);
            put_scales_k(group, group_q4_K::scales, group_q4_K::mins, r, src + 4);
            for (int64_t j = 0; j < 4; ++j) {
                for (int64_t l = 0; l < 32; ++l) {
                    v[64 * j + l] = src[16 + 32 * j + l] & 0xF;
                    v[64 * j + 32 + l] = src[16 + 32 * j + l] >> 4;
                }
            }
            put_nibbles_k(group + group_q4_K::qs, r, v);
            break;
        case GGML_TYPE_Q5_K: {   // d | dmin | scales[12] | qh[32] | qs[128]
            put_f16(group + group_q5_K::d, r, src);
            put_f16(group + group_q5_K::dmin, r, src + 2);
            put_scales_k(group, group_q5_K::scales, group_q5_K::mins, r, src + 4);
            const uint8_t * qh = src + 16;
            for (int64_t j = 0; j < 4; ++j) {
                for (int64_t l = 0; l < 32; ++l) {
                    v[64 * j + l] = (src[48 + 32 * j + l] & 0xF) | (((qh[l] >> (2 * j)) & 1) << 4);
                    v[64 * j + 32 + l] = (src[48 + 32 * j + l] >> 4) | (((qh[l] >> (2 * j + 1)) & 1) << 4);
                }
            }
            put_nibbles_k(group + group_q5_K::qs, r, v);
            for (int64_t l = 0; l < 32; ++l) {
                uint8_t bits = 0;
                for (int64_t j = 0; j < 4; ++j) {
                    bits |= ((v[64 * j + l] >> 4) & 1) << (2 * j);
                    bits |= ((v[64 * j + 32 + l] >> 4) & 1) << (2 * j + 1);
                }
                slot_byte(group + group_q5_K::qh, l / 4, r, l % 4) = bits;
            }
            break;
        }
        case GGML_TYPE_Q6_K: {   // ql[128] | qh[64] | scales[16] | d
            for (int64_t half = 0; half < 2; ++half) {
                const uint8_t * ql = src + 64 * half;
                const uint8_t * qh = src + 128 + 32 * half;
                uint8_t * out = v + 128 * half;
                for (int64_t l = 0; l < 32; ++l) {
                    out[l] = (ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4);
                    out[l + 32] = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
                    out[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                    out[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                }
            }
            for (int64_t s = 0; s < 32; ++s) {
                for (int64_t b = 0; b < 4; ++b) {
                    group[group_q6_K::low_slot(s) + r * 4 + b] =
                        static_cast<uint8_t>((v[4 * s + b] & 0xF) | ((v[4 * (s + 32) + b] & 0xF) << 4));
                }
            }
            for (int64_t h = 0; h < 16; ++h) {
                for (int64_t b = 0; b < 4; ++b) {
                    uint8_t bits = 0;
                    for (int64_t k = 0; k < 4; ++k) {
                        bits |= (v[4 * (h + 16 * k) + b] >> 4) << (2 * k);
                    }
                    group[group_q6_K::top_slot(h) + r * 4 + b] = bits;
                }
            }
            for (int64_t s = 0; s < 16; ++s) {
                group[group_q6_K::scales + s * 8 + r] = src[192 + s];
            }
            put_f16(group + group_q6_K::d, r, src + 208);
            break;
        }
        case GGML_TYPE_Q4_1: pack_row_32<group_q4_1>(src, group, r); break;
        case GGML_TYPE_Q5_0: pack_row_32<group_q5_0>(src, group, r); break;
        case GGML_TYPE_Q5_1: pack_row_32<group_q5_1>(src, group, r); break;
        case GGML_TYPE_IQ4_NL: pack_row_32<group_iq4_nl>(src, group, r); break;
        case GGML_TYPE_Q3_K: pack_q3_K_row(src, group, r); break;
        case GGML_TYPE_Q2_K: pack_q2_K_row(src, group, r); break;
        case GGML_TYPE_IQ4_XS: pack_iq4_xs_row(src, group, r); break;
        default: break;
    }
}

// ---- the reference: one element at a time, exactly as the kernels compute it ----

int32_t column_sum(const uint8_t * x, size_t offset) {
    int32_t s;
    std::memcpy(&s, x + offset, sizeof s);
    return s;
}

int32_t column_sum16(const uint8_t * x, size_t offset) {
    int16_t s;
    std::memcpy(&s, x + offset, sizeof s);
    return s;
}

float column_scale(const uint8_t * x, size_t offset) {
    float d;
    std::memcpy(&d, x + offset, sizeof d);
    return d;
}

const int8_t * column_values(const uint8_t * x) {
    return reinterpret_cast<const int8_t *>(x);
}

// Value i of row r of a row group block.
int32_t q8_0_value(const uint8_t * w, int64_t r, int64_t i) {
    return static_cast<int8_t>(slot_byte(w + group_q8_0::qs, i / 4, r, i % 4));
}
int32_t k_nibble(const uint8_t * qs, int64_t r, int64_t i) {
    const int64_t j = i / 64, l = i % 32;
    const uint8_t byte = slot_byte(qs, j * 8 + l / 4, r, l % 4);
    return (i % 64) < 32 ? byte & 0xF : byte >> 4;
}
int32_t q5_K_value(const uint8_t * w, int64_t r, int64_t i) {
    const int64_t j = i / 64, l = i % 32, hi = (i % 64) >= 32;
    const uint8_t bits = slot_byte(w + group_q5_K::qh, l / 4, r, l % 4);
    return k_nibble(w + group_q5_K::qs, r, i) | (((bits >> (2 * j + hi)) & 1) << 4);
}
int32_t q6_K_value(const uint8_t * w, int64_t r, int64_t i) {
    const int64_t g = i / 4, b = i % 4;
    const uint8_t low = w[group_q6_K::low_slot(g % 32) + r * 4 + b];
    const uint8_t top = w[group_q6_K::top_slot(g % 16) + r * 4 + b];
    return ((g < 32 ? low & 0xF : low >> 4)) | (((top >> (2 * (g / 16))) & 3) << 4);
}

// Values [first, first + n) of row r times the column's same values
template <typename Value>
int32_t dot_of(const uint8_t * w, const uint8_t * x, int64_t r, int64_t first, int64_t n, Value value) {
    int32_t dot = 0;
    for (int64_t i = first; i < first + n; ++i) {
        dot += value(w, r, i) * column_values(x)[i];
    }
    return dot;
}

template <typename Element>
void reference_group(const uint8_t * groups, size_t group_stride, int n_groups, const uint8_t * cols, size_t col_bytes,
                     int64_t n_blocks, int64_t n_cols, float * out, size_t out_stride, size_t block_bytes,
                     size_t act_bytes, Element element) {
    for (int gi = 0; gi < n_groups; ++gi) {
        for (int64_t c = 0; c < n_cols; ++c) {
            for (int64_t r = 0; r < k_group_rows; ++r) {
                float acc = 0.0f;
                for (int64_t b = 0; b < n_blocks; ++b) {
                    acc = element(groups + gi * group_stride + b * block_bytes, cols + c * col_bytes + b * act_bytes, r,
                                  acc);
                }
                out[c * out_stride + gi * k_group_rows + r] = acc;
            }
        }
    }
}

void reference_q8_0(const uint8_t * groups, size_t group_stride, int n_groups, const uint8_t * cols, size_t col_bytes,
                    int64_t n_blocks, int64_t n_cols, float * out, size_t out_stride) {
    reference_group(groups, group_stride, n_groups, cols, col_bytes, n_blocks, n_cols, out, out_stride,
                    group_q8_0::bytes, k_act32_bytes, [](const uint8_t * w, const uint8_t * x, int64_t r, float acc) {
                        const int32_t isum = dot_of(w, x, r, 0, 32, q8_0_value);
                        const float scale = f16(w + group_q8_0::d + 2 * r) * column_scale(x, k_act32_d);
                        return std::fmaf(scale, static_cast<float>(isum), acc);
                    });
}

// Q4_K and Q5_K: sum over sub-blocks of scale x dot, minus sum of min x column sum
template <typename Value>
float k_quant_element(const uint8_t * w, const uint8_t * x, int64_t r, float acc, size_t scales, size_t mins, size_t d,
                      size_t dmin, Value value) {
    int32_t isum = 0, msum = 0;
    for (int64_t j = 0; j < 8; ++j) {
        isum += dot_of(w, x, r, 32 * j, 32, value) * w[scales + j * 8 + r];
        msum += w[mins + group_q4_K::min_at(j, r)] * column_sum16(x, k_act256_sum32 + 2 * j);
    }
    const float dx = column_scale(x, k_act256_d);
    acc = std::fmaf(f16(w + d + 2 * r) * dx, static_cast<float>(isum), acc);
    return std::fmaf(-(f16(w + dmin + 2 * r) * dx), static_cast<float>(msum), acc);
}

void reference_q4_K(const uint8_t * groups, size_t group_stride, int n_groups, const uint8_t * cols, size_t col_bytes,
                    int64_t n_blocks, int64_t n_cols, float * out, size_t out_stride) {
    reference_group(groups, group_stride, n_groups, cols, col_bytes, n_blocks, n_cols, out, out_stride,
                    group_q4_K::bytes, k_act256_bytes, [](const uint8_t * w, const uint8_t * x, int64_t r, float acc) {
                        return k_quant_element(
                            w, x, r, acc, group_q4_K::scales, group_q4_K::mins, group_q4_K::d, group_q4_K::dmin,
                            [](const uint8_t * w, int64_t r, int64_t i) { return k_nibble(w + group_q4_K::qs, r, i); });
                    });
}

void reference_q5_K(const uint8_t * groups, size_t group_stride, int n_groups, const uint8_t * cols, size_t col_bytes,
                    int64_t n_blocks, int64_t n_cols, float * out, size_t out_stride) {
    reference_group(groups, group_stride, n_groups, cols, col_bytes, n_blocks, n_cols, out, out_stride,
                    group_q5_K::bytes, k_act256_bytes, [](const uint8_t * w, const uint8_t * x, int64_t r, float acc) {
                        return k_quant_element(w, x, r, acc, group_q5_K::scales, group_q5_K::mins, group_q5_K::d,
                                               group_q5_K::dmin, q5_K_value);
                    });
}

// Q6_K, Q3_K and IQ4_XS: the sum over sub-blocks of Sub values of a signed scale x (dot -
// Offset x the column's sum of them), then fmaf(d x dx, isum, acc). The column holds 32 x
// its sums of 16, so Offset x a sum is that / (32 / Offset): exact for Offset 32 and 4.
template <int64_t Sub, int32_t Offset, typename Value>
float signed_scales_element(const uint8_t * w, const uint8_t * x, int64_t r, float acc, size_t scales, size_t d,
                            Value value) {
    static_assert(Offset == 0 || (Sub == 16 && 32 % Offset == 0), "the column has 32 x its sums of 16");
    int32_t isum = 0;
    for (int64_t s = 0; s < 256 / Sub; ++s) {
        int32_t dot = dot_of(w, x, r, Sub * s, Sub, value);
        if constexpr (Offset != 0) {
            dot -= column_sum(x, k_act256_sum16x32 + 4 * s) / (32 / Offset);
        }
        isum += dot * static_cast<int8_t>(w[scales + s * 8 + r]);
    }
    const float scale = f16(w + d + 2 * r) * column_scale(x, k_act256_d);
    return std::fmaf(scale, static_cast<float>(isum), acc);
}

void reference_q6_K(const uint8_t * groups, size_t group_stride, int n_groups, const uint8_t * cols, size_t col_bytes,
                    int64_t n_blocks, int64_t n_cols, float * out, size_t out_stride) {
    reference_group(groups, group_stride, n_groups, cols, col_bytes, n_blocks, n_cols, out, out_stride,
                    group_q6_K::bytes, k_act256_bytes, [](const uint8_t * w, const uint8_t * x, int64_t r, float acc) {
                        return signed_scales_element<16, 32>(w, x, r, acc, group_q6_K::scales, group_q6_K::d,
                                                             q6_K_value);
                    });
}

// The Group32 types (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL): value i of row r, before the offset
template <typename Group>
int32_t value_32(const uint8_t * w, int64_t r, int64_t i) {
    const int64_t g = (i % 16) / 4, high = i >= 16;
    const uint8_t byte = slot_byte(w + Group::qs, g, r, i % 4);
    int32_t v = high ? byte >> 4 : byte & 0xF;
    if constexpr (Group::fifth_bit) {
        v |= ((slot_byte(w + Group::qh, 0, r, i % 4) >> (4 * high + g)) & 1) << 4;
    }
    if constexpr (Group::table) {
        v = k_iq4_values[v];
    }
    return v;
}

// The element of a Group32 type: isum = values . column - offset x column sum, exact; then
// acc = fmaf(d x dx, isum, acc) and, with a min, acc = fmaf(m x dx, column sum, acc): the
// scale's term first, then the min's, in every kernel.
template <typename Group>
void reference_32(const uint8_t * groups, size_t group_stride, int n_groups, const uint8_t * cols, size_t col_bytes,
                  int64_t n_blocks, int64_t n_cols, float * out, size_t out_stride) {
    reference_group(groups, group_stride, n_groups, cols, col_bytes, n_blocks, n_cols, out, out_stride, Group::bytes,
                    k_act32_bytes, [](const uint8_t * w, const uint8_t * x, int64_t r, float acc) {
                        const int32_t sum = column_sum(x, k_act32_sum);
                        const int32_t isum = dot_of(w, x, r, 0, 32, value_32<Group>) - Group::offset * sum;
                        const float dx = column_scale(x, k_act32_d);
                        acc = std::fmaf(f16(w + Group::d + 2 * r) * dx, static_cast<float>(isum), acc);
                        if constexpr (Group::has_min) {
                            acc = std::fmaf(f16(w + Group::m + 2 * r) * dx, static_cast<float>(sum), acc);
                        }
                        return acc;
                    });
}

// ---- the reference of Q3_K, Q2_K and IQ4_XS ----

// The low 2 bits of value i of row r in Q2_K's (and Q3_K's) qs slots
int32_t low2_value(const uint8_t * qs, int64_t r, int64_t i) {
    return (slot_byte(qs, i / 16, r, i % 4) >> (2 * ((i % 16) / 4))) & 3;
}
int32_t q3_K_value(const uint8_t * w, int64_t r, int64_t i) {   // 0..7: the value + 4
    const int64_t s = i / 16, k = (i % 16) / 4;
    const uint8_t bits = slot_byte(w + group_q3_K::hmask, s / 2, r, i % 4);
    return low2_value(w + group_q3_K::qs, r, i) | (((bits >> (4 * (s % 2) + k)) & 1) << 2);
}
int32_t iq4_xs_value(const uint8_t * w, int64_t r, int64_t i) {
    return k_iq4_values[k_nibble(w + group_iq4_xs::qs, r, i)];
}

void reference_q3_K(const uint8_t * groups, size_t group_stride, int n_groups, const uint8_t * cols, size_t col_bytes,
                    int64_t n_blocks, int64_t n_cols, float * out, size_t out_stride) {
    reference_group(groups, group_stride, n_groups, cols, col_bytes, n_blocks, n_cols, out, out_stride,
                    group_q3_K::bytes, k_act256_bytes, [](const uint8_t * w, const uint8_t * x, int64_t r, float acc) {
                        // the values + 4, less 4 x the column's sums; |isum| <= 16 x 32 x 16 x 4 x 127
                        return signed_scales_element<16, 4>(w, x, r, acc, group_q3_K::scales, group_q3_K::d,
                                                            q3_K_value);
                    });
}

void reference_q2_K(const uint8_t * groups, size_t group_stride, int n_groups, const uint8_t * cols, size_t col_bytes,
                    int64_t n_blocks, int64_t n_cols, float * out, size_t out_stride) {
    reference_group(groups, group_stride, n_groups, cols, col_bytes, n_blocks, n_cols, out, out_stride,
                    group_q2_K::bytes, k_act256_bytes, [](const uint8_t * w, const uint8_t * x, int64_t r, float acc) {
                        // sum over sub-blocks of 16 of scale x dot, minus sum of min x column sum, as Q4_K
                        // (the column sum: (32 x column sum) / 32)
                        int32_t isum = 0, msum = 0;
                        for (int64_t s = 0; s < 16; ++s) {
                            const uint8_t scale_min = w[group_q2_K::scales + s * 8 + r];
                            const int32_t dot =
                                dot_of(w, x, r, 16 * s, 16, [](const uint8_t * w, int64_t r, int64_t i) {
                                    return low2_value(w + group_q2_K::qs, r, i);
                                });
                            isum += dot * (scale_min & 0xF);
                            msum += (scale_min >> 4) * (column_sum(x, k_act256_sum16x32 + 4 * s) / 32);
                        }
                        const float dx = column_scale(x, k_act256_d);
                        acc = std::fmaf(f16(w + group_q2_K::d + 2 * r) * dx, static_cast<float>(isum), acc);
                        return std::fmaf(-(f16(w + group_q2_K::dmin + 2 * r) * dx), static_cast<float>(msum), acc);
                    });
}

void reference_iq4_xs(const uint8_t * groups, size_t group_stride, int n_groups, const uint8_t * cols, size_t col_bytes,
                      int64_t n_blocks, int64_t n_cols, float * out, size_t out_stride) {
    reference_group(
        groups, group_stride, n_groups, cols, col_bytes, n_blocks, n_cols, out, out_stride, group_iq4_xs::bytes,
        k_act256_bytes, [](const uint8_t * w, const uint8_t * x, int64_t r, float acc) {
            // |isum| <= 8 x 32 x 32 x 127 x 127 < 2^31
            return signed_scales_element<32, 0>(w, x, r, acc, group_iq4_xs::scales, group_iq4_xs::d, iq4_xs_value);
        });
}

// Rounds to the nearest integer, ties to even, for |v| < 2^22: adding 1.5 x 2^23 leaves
// no fraction bits. Plain arithmetic, so it vectorizes and gives the same bits anywhere.
inline float round_even(float v) {
    constexpr float magic = 12582912.0f;
    return (v + magic) - magic;
}

// Quantizes n values (a block) to int8 with scale amax / 127; returns the scale. A NaN
// or infinity makes the scale non-finite, so that the product's outputs are too (the
// engine then names the weights that failed) rather than quietly finite.
float quantize_block(const float * x, int64_t n, int8_t * q) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        const float a = std::fabs(x[i]);
        amax = (a > amax || a != a) ? a : amax;   // keeps a NaN once met
    }
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        const float v = std::min(127.0f, std::max(-127.0f, round_even(x[i] * id)));
        q[i] = static_cast<int8_t>(v);
    }
    return amax / 127.0f;
}

int32_t sum_of(const int8_t * q, int64_t n) {
    int32_t s = 0;
    for (int64_t i = 0; i < n; ++i) {
        s += q[i];
    }
    return s;
}

}  // namespace

const TypeLayout * layout_of(ggml_type type) {
    for (const TypeLayout & layout : k_layouts) {
        if (layout.type == type) {
            return &layout;
        }
    }
    return nullptr;
}

size_t packed_size(const TypeLayout & layout, int64_t n_in, int64_t n_rows) {
    return static_cast<size_t>(n_groups(n_rows) * (n_in / layout.block)) * layout.group_bytes;
}

void pack(const TypeLayout & layout, const void * rows, size_t row_stride, int64_t n_in, int64_t n_rows, void * dst) {
    const int64_t n_blocks = n_in / layout.block;
    const size_t src_block = layout.ggml_block_bytes;
    auto * out = static_cast<uint8_t *>(dst);
    std::memset(out, 0, packed_size(layout, n_in, n_rows));   // padding rows: zero scales, zero values
    for (int64_t g = 0; g < n_groups(n_rows); ++g) {
        for (int64_t r = 0; r < k_group_rows && g * k_group_rows + r < n_rows; ++r) {
            const auto * row = static_cast<const uint8_t *>(rows) + (g * k_group_rows + r) * row_stride;
            for (int64_t b = 0; b < n_blocks; ++b) {
                pack_row(layout.type, row + b * src_block, out + (g * n_blocks + b) * layout.group_bytes, r);
            }
        }
    }
}

size_t act_column_bytes(ActFormat format, int64_t n_in) {
    return format == ActFormat::q8_256 ? static_cast<size_t>(n_in / 256) * k_act256_bytes
                                       : static_cast<size_t>(n_in / 32) * k_act32_bytes;
}

void quantize_column(ActFormat format, const float * x, int64_t n_in, void * dst) {
    auto * out = static_cast<uint8_t *>(dst);
    if (format == ActFormat::q8_32) {
        for (int64_t b = 0; b < n_in / 32; ++b, out += k_act32_bytes, x += 32) {
            auto * q = reinterpret_cast<int8_t *>(out);
            const float d = quantize_block(x, 32, q);
            const int32_t sum = sum_of(q, 32);
            std::memcpy(out + k_act32_d, &d, sizeof d);
            std::memcpy(out + k_act32_sum, &sum, sizeof sum);
        }
        return;
    }
    for (int64_t b = 0; b < n_in / 256; ++b, out += k_act256_bytes, x += 256) {
        auto * q = reinterpret_cast<int8_t *>(out);
        const float d = quantize_block(x, 256, q);
        std::memcpy(out + k_act256_d, &d, sizeof d);
        for (int64_t j = 0; j < 8; ++j) {
            const auto sum = static_cast<int16_t>(sum_of(q + 32 * j, 32));   // |sum| <= 32 x 127
            std::memcpy(out + k_act256_sum32 + 2 * j, &sum, sizeof sum);
        }
        for (int64_t s = 0; s < 16; ++s) {
            const int32_t sum = 32 * sum_of(q + 16 * s, 16);
            std::memcpy(out + k_act256_sum16x32 + 4 * s, &sum, sizeof sum);
        }
    }
}

GroupKernel Kernels::of(ggml_type type) const {
    switch (type) {
        case GGML_TYPE_Q4_0: return q4_0;
        case GGML_TYPE_Q8_0: return q8_0;
        case GGML_TYPE_Q4_K: return q4_K;
        case GGML_TYPE_Q5_K: return q5_K;
        case GGML_TYPE_Q6_K: return q6_K;
        case GGML_TYPE_Q4_1: return q4_1;
        case GGML_TYPE_Q5_0: return q5_0;
        case GGML_TYPE_Q5_1: return q5_1;
        case GGML_TYPE_IQ4_NL: return iq4_nl;
        case GGML_TYPE_Q3_K: return q3_K;
        case GGML_TYPE_Q2_K: return q2_K;
        case GGML_TYPE_IQ4_XS: return iq4_xs;
        default: return nullptr;
    }
}

const Kernels & reference_kernels() {
    static const Kernels kernels{"reference",
                                 reference_32<group_q4_0>,
                                 reference_q8_0,
                                 reference_q4_K,
                                 reference_q5_K,
                                 reference_q6_K,
                                 reference_32<group_q4_1>,
                                 reference_32<group_q5_0>,
                                 reference_32<group_q5_1>,
                                 reference_32<group_iq4_nl>,
                                 reference_q3_K,
                                 reference_q2_K,
                                 reference_iq4_xs};
    return kernels;
}

}  // namespace river::own
