#include "exact_ops.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <vector>

#include "common.h"
#include "exact_check.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

namespace river {

namespace {

// Rows of `a` a work unit takes: each row is read once and dotted with every column
// of b while it is in L1 (ggml's own product tiles by 16 too).
constexpr int64_t k_rows_per_unit = 16;

// One thread's copy of the columns of b it needs, converted to the vec_dot type.
thread_local std::vector<char> t_columns;

// dst = a x b as ggml_mul_mat defines it, see exact_mul_mat. Threads take contiguous
// ranges of work units, a unit being k_rows_per_unit rows of one (i2, i3) slice; a
// thread converts a slice's columns when it first meets the slice. Every element is
// one vec_dot of one thread, so neither the column count nor nth changes a bit.
void exact_mul_mat_op(ggml_tensor * dst, int ith, int nth, void * /*userdata*/) {
    const ggml_tensor * a = dst->src[0];
    const ggml_tensor * b = dst->src[1];
    const ggml_type_traits_cpu * traits = ggml_get_type_traits_cpu(a->type);
    const ggml_type vec_dot_type = traits->vec_dot_type;
    const ggml_from_float_t from_float = ggml_get_type_traits_cpu(vec_dot_type)->from_float;
    const ggml_vec_dot_t vec_dot = traits->vec_dot;

    const int64_t K = a->ne[0], M = a->ne[1];
    const int64_t N = b->ne[1], B2 = b->ne[2], B3 = b->ne[3];
    const int64_t r2 = B2 / a->ne[2], r3 = B3 / a->ne[3];
    const size_t row_size = ggml_row_size(vec_dot_type, K);
    const int64_t units_per_slice = (M + k_rows_per_unit - 1) / k_rows_per_unit;
    const int64_t n_units = units_per_slice * B2 * B3;
    const int64_t first = n_units * ith / nth, last = n_units * (ith + 1) / nth;

    // F32 weights dot the F32 columns in place; other types need them converted
    const bool convert = !(vec_dot_type == GGML_TYPE_F32 && b->type == GGML_TYPE_F32);
    if (convert && t_columns.size() < row_size * N) {
        t_columns.resize(row_size * N);
    }
    int64_t converted = -1;   // the slice whose columns t_columns holds
    for (int64_t unit = first; unit < last; ++unit) {
        const int64_t slice = unit / units_per_slice;
        const int64_t i2 = slice % B2, i3 = slice / B2;
        const char * b_slice = static_cast<const char *>(b->data) + i2 * b->nb[2] + i3 * b->nb[3];
        if (convert && slice != converted) {
            for (int64_t n = 0; n < N; ++n) {
                from_float(reinterpret_cast<const float *>(b_slice + n * b->nb[1]), t_columns.data() + n * row_size, K);
            }
            converted = slice;
        }
        const char * a_slice = static_cast<const char *>(a->data) + (i2 / r2) * a->nb[2] + (i3 / r3) * a->nb[3];
        char * d_slice = static_cast<char *>(dst->data) + i2 * dst->nb[2] + i3 * dst->nb[3];
        const int64_t m_begin = (unit % units_per_slice) * k_rows_per_unit;
        const int64_t m_end = std::min(M, m_begin + k_rows_per_unit);
        for (int64_t m = m_begin; m < m_end; ++m) {
            const char * a_row = a_slice + m * a->nb[1];
            for (int64_t n = 0; n < N; ++n) {
                const void * column = convert ? t_columns.data() + n * row_size : b_slice + n * b->nb[1];
                float * out = reinterpret_cast<float *>(d_slice + n * dst->nb[1]) + m;
                vec_dot(static_cast<int>(K), out, 0, a_row, 0, column, 0, 1);
            }
        }
    }
}

}  // namespace

bool ggml_rows_alike(ggml_type type) {
    static std::mutex mutex;
    static std::map<ggml_type, bool> known;
    std::lock_guard<std::mutex> lock(mutex);
    const auto found = known.find(type);
    if (found != known.end()) {
        return found->second;
    }
    bool alike = false;
    if (!ggml_quantize_requires_imatrix(type) && ggml_get_type_traits(type)->blck_size > 0) {
        constexpr int64_t n_out = 64, n_in = 512, n_columns = 17;
        std::mt19937 rng(0);
        std::normal_distribution<float> normal;
        std::vector<float> weights(n_out * n_in), columns(n_columns * n_in);
        for (float & v : weights) {
            v = normal(rng);
        }
        for (float & v : columns) {
            v = normal(rng);
        }
        std::vector<uint8_t> data(ggml_row_size(type, n_in) * n_out);
        ggml_quantize_chunk(type, weights.data(), data.data(), 0, n_out, n_in, nullptr);
        alike = true;
        for (int64_t n : {int64_t{2}, int64_t{9}, n_columns}) {
            const std::vector<float> batch =
                row_products(type, data.data(), n_out, n_in, columns.data(), n, "", false, 2);
            for (int64_t j = 0; j < n && alike; ++j) {
                const std::vector<float> alone =
                    row_products(type, data.data(), n_out, n_in, columns.data() + j * n_in, 1, "", false, 2);
                alike = std::memcmp(alone.data(), batch.data() + j * n_out, sizeof(float) * n_out) == 0;
            }
        }
    }
    known[type] = alike;
    log(LogLevel::debug, std::string("ggml's CPU product by ") + ggml_type_name(type) +
                             (alike ? " gives a row the same bits in any batch"
                                    : " depends on the batch: exact rows take exact_mul_mat"));
    return alike;
}

bool exact_mul_mat_supports(const ggml_tensor * a) {
    const ggml_tensor * base = a->view_src ? a->view_src : a;
    if (!base->buffer || !ggml_backend_buffer_is_host(base->buffer) || base->extra != nullptr) {
        return false;
    }
    if (a->nb[0] != ggml_type_size(a->type)) {
        return false;   // rows of a must be contiguous
    }
    const ggml_type_traits_cpu * traits = ggml_get_type_traits_cpu(a->type);
    return traits->vec_dot != nullptr && ggml_get_type_traits_cpu(traits->vec_dot_type)->from_float != nullptr;
}

ggml_tensor * exact_mul_mat(ggml_context * ctx, ggml_tensor * a, ggml_tensor * b) {
    if (b->type != GGML_TYPE_F32 || b->nb[0] != sizeof(float) || a->ne[0] != b->ne[0] || b->ne[2] % a->ne[2] != 0 ||
        b->ne[3] % a->ne[3] != 0) {
        throw Error(std::string("exact_mul_mat cannot multiply ") + ggml_get_name(a) + " by " + ggml_get_name(b));
    }
    ggml_tensor * args[] = {a, b};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, a->ne[1], b->ne[1], b->ne[2], b->ne[3], args, 2, exact_mul_mat_op,
                          GGML_N_TASKS_MAX, nullptr);
}

}  // namespace river
