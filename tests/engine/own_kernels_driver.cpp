// Our own products (csrc/own_quant.h) by the reference and by one kernels set, written out
// for a test to compare (tests/own_kernels_check.py): built with a cross compiler and run
// under qemu for the NEON and i8mm kernels (test_own_kernels_neon.py), natively with vpdpbusd and
// vpdpwssd emulated for the AVX-512 VNNI ones (test_own_kernels_vnni_emulated.py). Judges
// nothing itself.
//
//   own_kernels_driver kernels
//     prints the kernels this CPU runs (own::kernels_here), one a line
//   own_kernels_driver products KERNELS TYPE N_IN ROWS COLUMNS OUT ROW_COUNTS COLUMN_COUNTS
//     KERNELS: the kernels set (i8mm, neon, avx512vnni, avx2), whether or not this CPU's
//     features offer it (the emulated VNNI kernels run on any AVX2 CPU);
//     ROWS: rows of TYPE (q4_0, q8_0, q4_k, q5_k, q6_k, q4_1, q5_0, q5_1, iq4_nl, q3_k,
//     q2_k, iq4_xs) in GGUF's layout, N_IN values each; COLUMNS: float32 columns of N_IN
//     values; ROW_COUNTS, COLUMN_COUNTS: comma lists.
//     OUT, float32: for each row count R, for each of reference and KERNELS, the first R rows
//     times each column alone (one column and one row group a kernel call, all the
//     columns), then times the first N columns for each column count N (N columns and two
//     row groups a call where there are two); each product [column][row].
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "own_kernels.h"

namespace own = river::own;

namespace {

std::vector<uint8_t> read_file(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw std::runtime_error("cannot read " + path);
    }
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<int64_t> counts_of(const std::string & list) {
    std::vector<int64_t> counts;
    std::stringstream parts(list);
    for (std::string part; std::getline(parts, part, ',');) {
        counts.push_back(std::stoll(part));
    }
    return counts;
}

ggml_type type_named(const std::string & name) {
    const std::pair<const char *, ggml_type> types[] = {
        {"q4_0", GGML_TYPE_Q4_0},     {"q8_0", GGML_TYPE_Q8_0}, {"q4_k", GGML_TYPE_Q4_K}, {"q5_k", GGML_TYPE_Q5_K},
        {"q6_k", GGML_TYPE_Q6_K},     {"q4_1", GGML_TYPE_Q4_1}, {"q5_0", GGML_TYPE_Q5_0}, {"q5_1", GGML_TYPE_Q5_1},
        {"iq4_nl", GGML_TYPE_IQ4_NL}, {"q3_k", GGML_TYPE_Q3_K}, {"q2_k", GGML_TYPE_Q2_K}, {"iq4_xs", GGML_TYPE_IQ4_XS}};
    for (const auto & [known, type] : types) {
        if (name == known) {
            return type;
        }
    }
    throw std::runtime_error("no own product for type " + name);
}

// The kernels called `name` among this build's tables, whether this CPU's features offer
// them or not (own::kernels_named would refuse the emulated VNNI kernels)
const own::Kernels & kernels_called(const std::string & name) {
    for (const own::Kernels * kernels : {own::vnni_kernels(), own::avx2_kernels(), own::i8mm_kernels(),
                                         own::neon_kernels(), &own::reference_kernels()}) {
        if (kernels && name == kernels->name) {
            return *kernels;
        }
    }
    throw std::runtime_error("this build has no own kernels " + name);
}

// rows x n_cols columns (quantized, col_bytes apart): [column][row]. In pairs of whole
// row groups where `pairs` (as own_mul_mat.cpp calls the kernels), else one group a call;
// a part group (n_rows not a multiple of 8) goes alone into a scratch tile.
std::vector<float> product(const own::TypeLayout & layout, own::GroupKernel kernel, const std::vector<uint8_t> & packed,
                           int64_t n_in, int64_t n_rows, const uint8_t * cols, size_t col_bytes, int64_t n_cols,
                           bool pairs) {
    const int64_t n_blocks = n_in / layout.block;
    const size_t group_bytes = static_cast<size_t>(n_blocks) * layout.group_bytes;
    const int64_t whole = n_rows / own::k_group_rows;
    std::vector<float> out(static_cast<size_t>(n_cols * n_rows));
    int64_t g = 0;
    while (g < whole) {
        const int n = pairs && g + 1 < whole ? 2 : 1;
        kernel(packed.data() + g * group_bytes, group_bytes, n, cols, col_bytes, n_blocks, n_cols,
               out.data() + g * own::k_group_rows, static_cast<size_t>(n_rows));
        g += n;
    }
    if (g * own::k_group_rows < n_rows) {
        std::vector<float> tile(static_cast<size_t>(n_cols * own::k_group_rows));
        kernel(packed.data() + g * group_bytes, group_bytes, 1, cols, col_bytes, n_blocks, n_cols, tile.data(),
               own::k_group_rows);
        for (int64_t c = 0; c < n_cols; ++c) {
            for (int64_t r = g * own::k_group_rows; r < n_rows; ++r) {
                out[c * n_rows + r] = tile[c * own::k_group_rows + r - g * own::k_group_rows];
            }
        }
    }
    return out;
}

void write_products(char ** argv) {
    const own::TypeLayout & layout = *own::layout_of(type_named(argv[3]));
    const int64_t n_in = std::stoll(argv[4]);
    const std::vector<uint8_t> rows = read_file(argv[5]);
    const std::vector<uint8_t> values = read_file(argv[6]);
    const size_t row_bytes = static_cast<size_t>(n_in / layout.block) * layout.ggml_block_bytes;
    const auto n_cols = static_cast<int64_t>(values.size() / (sizeof(float) * static_cast<size_t>(n_in)));
    const size_t col_bytes = own::act_column_bytes(layout.act, n_in);
    std::vector<uint8_t> cols(col_bytes * static_cast<size_t>(n_cols));
    for (int64_t c = 0; c < n_cols; ++c) {
        own::quantize_column(layout.act, reinterpret_cast<const float *>(values.data()) + c * n_in, n_in,
                             cols.data() + c * col_bytes);
    }
    std::ofstream out(argv[7], std::ios::binary);
    const auto write = [&out](const std::vector<float> & v) {
        out.write(reinterpret_cast<const char *>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    };
    for (const int64_t n_rows : counts_of(argv[8])) {
        if (static_cast<size_t>(n_rows) * row_bytes > rows.size()) {
            throw std::runtime_error("the rows file holds fewer than " + std::to_string(n_rows) + " rows");
        }
        std::vector<uint8_t> packed(own::packed_size(layout, n_in, n_rows));
        own::pack(layout, rows.data(), row_bytes, n_in, n_rows, packed.data());
        for (const std::string & name : {std::string("reference"), std::string(argv[2])}) {
            const own::GroupKernel kernel = kernels_called(name).of(layout.type);
            if (!kernel) {
                throw std::runtime_error("the kernels " + name + " have none for type " + argv[3]);
            }
            for (int64_t c = 0; c < n_cols; ++c) {
                write(product(layout, kernel, packed, n_in, n_rows, cols.data() + c * col_bytes, col_bytes, 1, false));
            }
            for (const int64_t n : counts_of(argv[9])) {
                if (n > n_cols) {
                    throw std::runtime_error("the columns file holds fewer than " + std::to_string(n) + " columns");
                }
                write(product(layout, kernel, packed, n_in, n_rows, cols.data(), col_bytes, n, true));
            }
        }
    }
    if (!out) {
        throw std::runtime_error(std::string("cannot write ") + argv[7]);
    }
}

}  // namespace

int main(int argc, char ** argv) {
    try {
        const std::string mode = argc > 1 ? argv[1] : "";
        if (mode == "kernels" && argc == 2) {
            for (const own::Kernels * kernels : own::kernels_here()) {
                std::printf("%s\n", kernels->name);
            }
            return 0;
        }
        if (mode == "products" && argc == 10) {
            write_products(argv);
            return 0;
        }
        std::fprintf(stderr,
                     "usage: %s kernels | products KERNELS TYPE N_IN ROWS COLUMNS OUT ROW_COUNTS COLUMN_COUNTS\n",
                     argv[0]);
    } catch (const std::exception & e) {
        std::fprintf(stderr, "%s\n", e.what());
    }
    return 1;
}
