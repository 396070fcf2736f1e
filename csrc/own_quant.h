// Our own layout of quantized matrices and the one definition of their product.
//
// A matrix of a covered type (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K; Q4_1, Q5_0, Q5_1, IQ4_NL;
// Q3_K, Q2_K, IQ4_XS) is packed once at load into row groups: 8 rows interleaved 4 bytes
// at a time, so that one 256-bit load holds the same 4 values of 8 rows and a dot-product
// instruction gives 8 rows' partial sums at once. Activations (the columns) are quantized to int8 per block, each
// column alone.
//
// Element (m, n) of a product is defined as: per weight block, an integer dot product
// (exact, so any instruction order gives the same integer), turned into a float and
// added to one float accumulator with fused multiply-adds, block after block. Nothing
// in that definition depends on how many columns there are or which are computed
// together, so a column's result is the same bits in a step, a verify and a prompt.
// Every kernel (own_kernels_*.cpp) computes exactly this; the reference here spells it
// out one element at a time, and tests hold the kernels to it bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ggml.h"

namespace river::own {

constexpr int64_t k_group_rows = 8;   // rows interleaved in a row group

// How a column is quantized: per 256 values (K-quants) or per 32 (the types of 32-value blocks).
enum class ActFormat { q8_256, q8_32 };

// Byte offsets of one block of a quantized column.
// q8_256: int8 qs[256] | f32 d | i16 sums of each 32 values [8] | i32 32 x sums of each 16 [16]
// q8_32:  int8 qs[32]  | f32 d | i32 sum
constexpr size_t k_act256_d = 256, k_act256_sum32 = 260, k_act256_sum16x32 = 276, k_act256_bytes = 340;
constexpr size_t k_act32_d = 32, k_act32_sum = 36, k_act32_bytes = 40;

// Offsets of one block of a row group (8 rows), per type. A "slot" is 32 bytes: 4 bytes
// of each of the 8 rows, byte b of row r at r * 4 + b.
constexpr size_t k_slot = 32;

// The 16 values an IQ4_NL or IQ4_XS nibble stands for (GGUF's non-linear grid).
inline constexpr int8_t k_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// ---- 32-value blocks of nibbles, with a min, a fifth bit or a table of values as the type
// has them: Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (Group32)
// qs: 4 slots (slot g: low nibbles values 4g.., high nibbles 16 + 4g..); with a fifth bit,
// qh: 1 slot whose byte b holds in bit g the fifth bit of value 4g + b and in bit 4 + g
// that of value 16 + 4g + b; then d and, with a min, m: f16 [8 rows].
// A row's value is its nibble (with the fifth bit as bit 4) less `offset`, or IQ4_NL's
// table entry at its nibble; the weight is d x value (+ m).
template <bool Min, bool FifthBit, int32_t Offset, bool Table>
struct Group32 {
    static constexpr bool has_min = Min, fifth_bit = FifthBit, table = Table;
    static constexpr int32_t offset = Offset;
    static constexpr size_t qs = 0, qh = 128, d = FifthBit ? 160 : 128, m = d + 16, bytes = d + (Min ? 32 : 16);
};
using group_q4_0 = Group32<false, false, 8, false>;    // d | qs[16]: d x (q - 8)
using group_q4_1 = Group32<true, false, 0, false>;     // d | m | qs[16]: d x q + m
using group_q5_0 = Group32<false, true, 16, false>;    // d | qh[4] | qs[16]: d x (q - 16)
using group_q5_1 = Group32<true, true, 0, false>;      // d | m | qh[4] | qs[16]: d x q + m
using group_iq4_nl = Group32<false, false, 0, true>;   // d | qs[16]: d x k_iq4_values[q]

namespace group_q8_0 {
constexpr size_t qs = 0, d = 256, bytes = 272;   // qs: 8 slots of int8, values 4g..
}
namespace group_q4_K {
// qs: 32 slots (chunk j, group g): low nibbles values 64j + 4g.., high 64j + 32 + 4g..
// scales: u8 [8 sub-blocks of 32][8 rows]; mins: u8 [4 pairs of sub-blocks][8 rows][2]
// (a pair per row, for 16-bit pair dot products); d, dmin: f16 [8 rows]
constexpr size_t qs = 0, scales = 1024, mins = 1088, d = 1152, dmin = 1168, bytes = 1184;
constexpr size_t min_at(int64_t j, int64_t r) {
    return static_cast<size_t>((j / 2) * 16 + r * 2 + j % 2);
}
}  // namespace group_q4_K
namespace group_q5_K {
// as q4_K (mins at the same min_at), plus qh: 8 slots (group g): bit 2j of byte b is the fifth bit of value
// 64j + 4g + b, bit 2j + 1 that of 64j + 32 + 4g + b
constexpr size_t qs = 0, qh = 1024, scales = 1280, mins = 1344, d = 1408, dmin = 1424, bytes = 1440;
}  // namespace group_q5_K
namespace group_q6_K {
// 16 triples of slots, one after the other so that a kernel reads the block in order:
// triple h = [low slot h, low slot h + 16, top slot h], where low slot s holds in its low
// nibbles the low 4 bits of values 4s.., in its high nibbles those of 4(s + 32)..; and
// top slot h in bits 2k, 2k + 1 of byte b the top 2 bits of value 4(h + 16k) + b.
// scales: i8 [16 sub-blocks of 16][8 rows]; d: f16 [8 rows]
constexpr size_t triple = 96, scales = 1536, d = 1664, bytes = 1680;
constexpr size_t low_slot(int64_t s) {
    return static_cast<size_t>(s % 16) * triple + (s < 16 ? 0 : k_slot);
}
constexpr size_t top_slot(int64_t h) {
    return static_cast<size_t>(h) * triple + 2 * k_slot;
}
}  // namespace group_q6_K

// ---- the 256-value types of few bits: Q3_K, Q2_K, IQ4_XS ----
namespace group_q2_K {
// qs: 16 slots, slot s = sub-block s of 16 values: bits 2k, 2k + 1 of byte b the value
// 16s + 4k + b (0..3); scales: u8 [16 sub-blocks][8 rows], GGUF's byte (scale | min << 4);
// d, dmin: f16 [8 rows]
constexpr size_t qs = 0, scales = 512, d = 640, dmin = 656, bytes = 672;
}  // namespace group_q2_K
namespace group_q3_K {
// qs: as q2_K's, the low 2 bits of each value; hmask: 8 slots, slot h bit 4k' + k of
// byte b the third bit of value 16(2h + k') + 4k + b (sub-blocks 2h, 2h + 1); a value is
// those 3 bits (0..7) minus 4. scales: i8 [16 sub-blocks][8 rows] (GGUF's 6 bits minus 32);
// d: f16 [8 rows]
constexpr size_t qs = 0, hmask = 512, scales = 768, d = 896, bytes = 912;
}  // namespace group_q3_K
namespace group_iq4_xs {
// qs: as q4_K's nibbles (chunk j of 64 values: low nibbles values 64j + 4g.., high 64j +
// 32 + 4g..), each an index into k_iq4_values; scales: i8 [8 sub-blocks of 32][8 rows]
// (GGUF's 6 bits minus 32); d: f16 [8 rows]
constexpr size_t qs = 0, scales = 1024, d = 1088, bytes = 1104;
}  // namespace group_iq4_xs

struct TypeLayout {
    ggml_type type;
    int64_t block;            // values per block of a row
    size_t ggml_block_bytes;  // bytes of one block in ggml's (GGUF's) layout
    size_t group_bytes;   // bytes of one block of a row group (8 rows)
    ActFormat act;
};

// Our layout of `type`, or nullptr where we have no product for it.
const TypeLayout * layout_of(ggml_type type);

// Row groups of a matrix with n_rows rows (the last one padded with zero rows).
inline int64_t n_groups(int64_t n_rows) {
    return (n_rows + k_group_rows - 1) / k_group_rows;
}

// Bytes of a packed [n_in, n_rows] matrix of `type`.
size_t packed_size(const TypeLayout & layout, int64_t n_in, int64_t n_rows);

// Packs n_rows rows of n_in values in ggml's layout (row i at rows + i * row_stride)
// into dst (packed_size bytes): row group after row group, each block after block.
void pack(const TypeLayout & layout, const void * rows, size_t row_stride, int64_t n_in, int64_t n_rows, void * dst);

size_t act_column_bytes(ActFormat format, int64_t n_in);

// Quantizes one column of n_in floats into dst (act_column_bytes). The same code for
// every kernel, so a column quantizes to the same bytes wherever it is.
void quantize_column(ActFormat format, const float * x, int64_t n_in, void * dst);

// n_groups (1 or 2) row groups of 8 rows (n_blocks blocks each; group gi's at groups +
// gi * group_stride) times n_cols quantized columns (column c at cols + c * col_bytes):
// out[c * out_stride + gi * 8 + r]. Two groups at once let a kernel reuse each column
// load for 16 rows; the result is the same bits either way.
using GroupKernel = void (*)(const uint8_t * groups, size_t group_stride, int n_groups, const uint8_t * cols,
                             size_t col_bytes, int64_t n_blocks, int64_t n_cols, float * out, size_t out_stride);

// The kernels of one instruction set, by covered type; nullptr where it has none.
struct Kernels {
    const char * name;
    GroupKernel q4_0, q8_0, q4_K, q5_K, q6_K;
    GroupKernel q4_1, q5_0, q5_1, iq4_nl;   // the Group32 types
    GroupKernel q3_K, q2_K, iq4_xs;         // the 256-value types of few bits
    GroupKernel of(ggml_type type) const;
};

// The element-at-a-time definition (own_quant.cpp).
const Kernels & reference_kernels();

}  // namespace river::own
