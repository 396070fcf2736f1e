// own_bench.h's measurements. This file is compiled for the baseline instruction set,
// as own_kernels.cpp is: each peak loop is compiled for its own by a function attribute
// and runs only for a kernel set that kernels_here offers, so only on a CPU that has it.
#include "own_bench.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <random>

#include "common.h"
#include "ggml_ptr.h"
#include "own_mul_mat.h"

#if defined(__x86_64__) || defined(_M_X64)
#define OWN_BENCH_X86 1
#include <immintrin.h>
#endif

// the NEON kernels' condition (own_kernels_neon.cpp): where they are built, sdot is reachable
#if defined(__aarch64__) && (defined(__ARM_FEATURE_DOTPROD) || !defined(__clang__) || __clang_major__ >= 16)
#define OWN_BENCH_NEON 1
#include <arm_neon.h>
// and the i8mm kernels' (own_kernels_i8mm.cpp): smmla is reachable
#if defined(__ARM_FEATURE_MATMUL_INT8) || (!defined(__clang__) && __GNUC__ >= 10) || __clang_major__ >= 16
#define OWN_BENCH_I8MM 1
#endif
#endif

namespace river::own {

namespace {

// Calls run(reps), which does reps units of work, with reps doubling until a run takes
// an eighth of `seconds`, and on until the runs took `seconds` in all: the fewest seconds
// per unit of any run (on a shared machine the least disturbed one).
template <typename Run>
double fastest_per_unit(Run run, double seconds) {
    using clock = std::chrono::steady_clock;
    double best = std::numeric_limits<double>::infinity(), total = 0;
    int64_t reps = 1;
    do {
        const auto start = clock::now();
        run(reps);
        const double took = std::chrono::duration<double>(clock::now() - start).count();
        best = std::min(best, took / static_cast<double>(reps));
        total += took;
        if (took < seconds / 8) {
            reps *= 2;
        }
    } while (total < seconds);
    return best;
}

// The peak loops: n rounds of independent accumulator chains of one instruction (or the
// kernels' sequence), each round in asm statements of 8 chains. Written in asm: the compiler
// would otherwise share, hoist or fold products of the same operands, and GCC keeps
// accumulator arrays in memory or copies registers between rounds; a volatile asm is
// run as written, every round. Enough chains to cover the instruction's latency times
// the products it starts per cycle on the cores we know (4 x 2 for vpdpbusd on Zen 4).
// In each asm statement accumulators a[0..7] are operands %0..%7 (asm takes 30
// operands, an in-out one counting twice); the operands after them are listed in each loop.
#define OWN_ACC8(R, a) \
    "+" R(a[0]), "+" R(a[1]), "+" R(a[2]), "+" R(a[3]), "+" R(a[4]), "+" R(a[5]), "+" R(a[6]), "+" R(a[7])
#define OWN_EACH8(I) I(0) I(1) I(2) I(3) I(4) I(5) I(6) I(7)

// Rounds of a peak loop per unit of fastest_per_unit's work: long enough to hide a call.
constexpr int64_t k_rounds = 4096;

#if OWN_BENCH_X86
constexpr int k_vnni_chains = 16;   // of 32 vector registers: two statements a round
constexpr int k_avx2_chains = 8;    // of 16, with u, s, the ones and two 16-bit sums: one

// %8: u, %9: s; registers named as ymm (operand modifier t) or zmm (g)
#define OWN_VPDPBUSD_YMM(k) "vpdpbusd %t9, %t8, %t" #k "\n\t"
#define OWN_VPDPBUSD_ZMM(k) "vpdpbusd %g9, %g8, %g" #k "\n\t"

__attribute__((target("avx2,avx512f,avx512vl,avx512vnni"))) void vpdpbusd_ymm(int64_t n) {
    const __m256i u = _mm256_set1_epi8(1), s = _mm256_set1_epi8(1);
    __m256i acc[k_vnni_chains] = {};
    for (int64_t i = 0; i < n; ++i) {
        __asm__ volatile(OWN_EACH8(OWN_VPDPBUSD_YMM) : OWN_ACC8("v", acc) : "v"(u), "v"(s));
        __asm__ volatile(OWN_EACH8(OWN_VPDPBUSD_YMM) : OWN_ACC8("v", (acc + 8)) : "v"(u), "v"(s));
    }
}

__attribute__((target("avx2,avx512f,avx512vl,avx512vnni"))) void vpdpbusd_zmm(int64_t n) {
    const __m512i u = _mm512_set1_epi8(1), s = _mm512_set1_epi8(1);
    __m512i acc[k_vnni_chains] = {};
    for (int64_t i = 0; i < n; ++i) {
        __asm__ volatile(OWN_EACH8(OWN_VPDPBUSD_ZMM) : OWN_ACC8("v", acc) : "v"(u), "v"(s));
        __asm__ volatile(OWN_EACH8(OWN_VPDPBUSD_ZMM) : OWN_ACC8("v", (acc + 8)) : "v"(u), "v"(s));
    }
}

// the AVX2 kernels' dot product (own_kernels_x86.inc, OWN_VNNI 0): acc + the pairs' sums of
// maddubs(u, s) into %k; %t: the 16-bit sums (%8 and %9, alternately), %10: u, %11: s,
// %12: 16-bit ones
#define OWN_MADDUBS(k, t) \
    "vpmaddubsw %11, %10, %" #t "\n\tvpmaddwd %12, %" #t ", %" #t "\n\tvpaddd %" #t ", %" #k ", %" #k "\n\t"

__attribute__((target("avx2"))) void maddubs_ymm(int64_t n) {
    const __m256i u = _mm256_set1_epi8(1), s = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
    __m256i acc[k_avx2_chains] = {};
    __m256i t0, t1;
    for (int64_t i = 0; i < n; ++i) {
        __asm__ volatile(OWN_MADDUBS(0, 8) OWN_MADDUBS(1, 9) OWN_MADDUBS(2, 8) OWN_MADDUBS(3, 9) OWN_MADDUBS(4, 8)
                             OWN_MADDUBS(5, 9) OWN_MADDUBS(6, 8) OWN_MADDUBS(7, 9)
                         : OWN_ACC8("x", acc), "=&x"(t0), "=&x"(t1)
                         : "x"(u), "x"(s), "x"(ones));
    }
}

// the AVX2 kernels' 16-bit runs (own_kernels_x86.inc's Sums): acc (16-bit) + maddubs(u, s)
// into %k, by way of %8 and %9 alternately; %10: u, %11: s
#define OWN_MADDUBS16(k, t) "vpmaddubsw %11, %10, %" #t "\n\tvpaddw %" #t ", %" #k ", %" #k "\n\t"

__attribute__((target("avx2"))) void maddubs16_ymm(int64_t n) {
    const __m256i u = _mm256_set1_epi8(1), s = _mm256_set1_epi8(1);
    __m256i acc[k_avx2_chains] = {};
    __m256i t0, t1;
    for (int64_t i = 0; i < n; ++i) {
        __asm__ volatile(OWN_MADDUBS16(0, 8) OWN_MADDUBS16(1, 9) OWN_MADDUBS16(2, 8) OWN_MADDUBS16(3, 9)
                             OWN_MADDUBS16(4, 8) OWN_MADDUBS16(5, 9) OWN_MADDUBS16(6, 8) OWN_MADDUBS16(7, 9)
                         : OWN_ACC8("x", acc), "=&x"(t0), "=&x"(t1)
                         : "x"(u), "x"(s));
    }
}

#endif

#if OWN_BENCH_NEON
// sdot for this function alone, as own_kernels_neon.cpp reaches it without a flag
#if !defined(__ARM_FEATURE_DOTPROD)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("dotprod"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
#endif
#endif
constexpr int k_neon_chains = 16;   // of 32 vector registers: two statements a round

// %8: u, %9: s
#define OWN_SDOT(k) "sdot %" #k ".4s, %8.16b, %9.16b\n\t"

void sdot_q(int64_t n) {
    const int8x16_t u = vdupq_n_s8(1), s = vdupq_n_s8(1);
    int32x4_t acc[k_neon_chains] = {};
    for (int64_t i = 0; i < n; ++i) {
        __asm__ volatile(OWN_EACH8(OWN_SDOT) : OWN_ACC8("w", acc) : "w"(u), "w"(s));
        __asm__ volatile(OWN_EACH8(OWN_SDOT) : OWN_ACC8("w", (acc + 8)) : "w"(u), "w"(s));
    }
}
#if !defined(__ARM_FEATURE_DOTPROD)
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

#if OWN_BENCH_I8MM
#define OWN_SMMLA(k) "smmla %" #k ".4s, %8.16b, %9.16b\n\t"

// smmla for this function alone, as own_kernels_i8mm.cpp reaches it without a flag
#if defined(__clang__)
__attribute__((target("i8mm")))
#else
__attribute__((target("arch=armv8.2-a+i8mm")))
#endif
void smmla_q(int64_t n) {
    const int8x16_t u = vdupq_n_s8(1), s = vdupq_n_s8(1);
    int32x4_t acc[k_neon_chains] = {};
    for (int64_t i = 0; i < n; ++i) {
        __asm__ volatile(OWN_EACH8(OWN_SMMLA) : OWN_ACC8("w", acc) : "w"(u), "w"(s));
        __asm__ volatile(OWN_EACH8(OWN_SMMLA) : OWN_ACC8("w", (acc + 8)) : "w"(u), "w"(s));
    }
}
#endif
#endif

// loop(n) does n rounds of `chains` instructions of `macs` multiply-adds each
InstructionPeak peak_of(const char * instruction, void (*loop)(int64_t), int chains, int macs, double seconds) {
    const double unit_s = fastest_per_unit([loop](int64_t reps) { loop(reps * k_rounds); }, seconds);
    return {instruction, static_cast<double>(k_rounds) * chains * macs / unit_s};
}

}  // namespace

std::vector<InstructionPeak> instruction_peaks(const Kernels & kernels, double seconds) {
    const std::string name = kernels.name;
    std::vector<InstructionPeak> peaks;
#if OWN_BENCH_X86
    if (name == "avx512vnni") {
        peaks.push_back(peak_of("vpdpbusd ymm", vpdpbusd_ymm, k_vnni_chains, 32, seconds));
        peaks.push_back(peak_of("vpdpbusd zmm", vpdpbusd_zmm, k_vnni_chains, 64, seconds));
    } else if (name == "avx2") {
        peaks.push_back(peak_of("vpmaddubsw+vpmaddwd+vpaddd ymm", maddubs_ymm, k_avx2_chains, 32, seconds));
        // the kernels' runs of 16-bit sums need no vpmaddwd per product: their bound
        peaks.push_back(peak_of("vpmaddubsw+vpaddw ymm", maddubs16_ymm, k_avx2_chains, 32, seconds));
    }
#endif
#if OWN_BENCH_NEON
    if (name == "neon") {
        peaks.push_back(peak_of("sdot q", sdot_q, k_neon_chains, 16, seconds));
    }
#endif
#if OWN_BENCH_I8MM
    if (name == "i8mm") {
        peaks.push_back(peak_of("smmla q", smmla_q, k_neon_chains, 32, seconds));   // 2 x 2 x 8
        peaks.push_back(peak_of("sdot q", sdot_q, k_neon_chains, 16, seconds));    // its single columns'
    }
#endif
    return peaks;
}

std::vector<double> product_seconds(const Kernels & kernels, ggml_type type, int64_t n_rows, int64_t n_in,
                                    const std::vector<int64_t> & n_cols, double seconds) {
    const TypeLayout * layout = layout_of(type);
    if (!layout || !kernels.of(type)) {
        throw Error(std::string("the own kernels '") + kernels.name + "' have no product for " + ggml_type_name(type));
    }
    if (n_rows <= 0 || n_in <= 0 || n_in % layout->block != 0) {
        throw Error("a product needs rows whose length is a positive multiple of " + std::to_string(layout->block) +
                    " for " + ggml_type_name(type));
    }
    if (n_cols.empty() || *std::min_element(n_cols.begin(), n_cols.end()) <= 0) {
        throw Error("column counts must be positive");
    }
    const int64_t max_cols = *std::max_element(n_cols.begin(), n_cols.end());
    std::mt19937 rng(0);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    const auto random_values = [&](int64_t n) {
        std::vector<float> values(static_cast<size_t>(n));
        std::generate(values.begin(), values.end(), [&] { return uniform(rng); });
        return values;
    };

    // the matrix: quantized by ggml, packed as OwnMatrices packs it
    const size_t row_bytes = ggml_row_size(type, n_in);
    std::vector<uint8_t> rows(row_bytes * static_cast<size_t>(n_rows));
    ggml_quantize_chunk(type, random_values(n_rows * n_in).data(), rows.data(), 0, n_rows, n_in, nullptr);
    ContextPtr ctx = new_metadata_context(1);
    OwnMatrix m;
    m.layout = layout;
    m.kernels = &kernels;
    m.n_in = n_in;
    m.n_rows = n_rows;
    m.packed = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_I8, static_cast<int64_t>(packed_size(*layout, n_in, n_rows)));
    BufferPtr buffer(ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), ggml_backend_cpu_buffer_type()));
    if (!buffer) {
        throw Error("cannot allocate memory for the packed matrix");
    }
    pack(*layout, rows.data(), row_bytes, n_in, n_rows, m.packed->data);

    const size_t col_bytes = act_column_bytes(layout->act, n_in);
    std::vector<uint8_t> cols(col_bytes * static_cast<size_t>(max_cols));
    const std::vector<float> x = random_values(max_cols * n_in);
    for (int64_t c = 0; c < max_cols; ++c) {
        quantize_column(layout->act, x.data() + c * n_in, n_in, cols.data() + c * col_bytes);
    }
    std::vector<float> out(static_cast<size_t>(n_rows * max_cols));
    std::vector<double> per_product;
    for (const int64_t n : n_cols) {
        per_product.push_back(fastest_per_unit(
            [&](int64_t reps) {
                for (int64_t r = 0; r < reps; ++r) {
                    own_gemm_groups(m, n_rows, 0, n_groups(n_rows), cols.data(), col_bytes, n, out.data(),
                                    static_cast<size_t>(n_rows));
                    __asm__ volatile("" : : "r"(out.data()) : "memory");   // as if the products were read
                }
            },
            seconds));
    }
    return per_product;
}

}  // namespace river::own
