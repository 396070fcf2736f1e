#include "own_mul_mat.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <system_error>
#include <thread>

#include "common.h"

namespace river {

namespace {

const own::ActFormat k_formats[] = {own::ActFormat::q8_256, own::ActFormat::q8_32};

// Columns a thread quantizes: its share, in column order. Each column alone.
void quantize_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const own::ActFormat format = *static_cast<const own::ActFormat *>(userdata);
    const ggml_tensor * x = dst->src[0];
    const int64_t n_cols = x->ne[1];
    for (int64_t n = n_cols * ith / nth; n < n_cols * (ith + 1) / nth; ++n) {
        own::quantize_column(format, reinterpret_cast<const float *>(static_cast<const char *>(x->data) + n * x->nb[1]),
                             x->ne[0], static_cast<char *>(dst->data) + n * dst->nb[1]);
    }
}

// Columns per pass over a thread's row groups: as many quantized columns as fit in
// about 256 KiB (half of a small L2), so that they stay cached while the row groups
// stream by; a multiple of 4, the widest kernel tile.
int64_t column_block(size_t col_bytes) {
    const int64_t fit = static_cast<int64_t>((256 * 1024) / std::max<size_t>(col_bytes, 1));
    return std::max<int64_t>(4, std::min<int64_t>(64, fit) / 4 * 4);
}

}  // namespace

// Every element is computed by one kernel call as own_quant.h defines it, so neither the
// column count nor the range of row groups changes a bit.
void own_gemm_groups(const OwnMatrix & m, int64_t n_rows, int64_t first, int64_t last, const uint8_t * cols,
                     size_t col_bytes, int64_t n_cols, float * out, size_t out_stride) {
    const int64_t n_blocks = m.n_in / m.layout->block;
    const size_t group_bytes = static_cast<size_t>(n_blocks) * m.layout->group_bytes;
    const own::GroupKernel kernel = m.kernels->of(m.layout->type);
    const int64_t block = column_block(col_bytes);
    const auto * packed = static_cast<const uint8_t *>(m.packed->data);
    std::vector<float> tail;   // the last row group's 8 rows, where n_rows is not a multiple of 8
    for (int64_t c0 = 0; c0 < n_cols; c0 += block) {
        const int64_t nc = std::min(block, n_cols - c0);
        const uint8_t * block_cols = cols + c0 * col_bytes;
        int64_t g = first;
        // whole row groups, two at a time where there are two
        while (g < last && (g + 1) * own::k_group_rows <= n_rows) {
            const int n = g + 1 < last && (g + 2) * own::k_group_rows <= n_rows ? 2 : 1;
            kernel(packed + g * group_bytes, group_bytes, n, block_cols, col_bytes, n_blocks, nc,
                   out + c0 * out_stride + g * own::k_group_rows, out_stride);
            g += n;
        }
        if (g < last) {   // the part group: its 8 rows into `tail`, the real ones copied out
            const int64_t r0 = g * own::k_group_rows;
            tail.resize(static_cast<size_t>(nc * own::k_group_rows));
            kernel(packed + g * group_bytes, group_bytes, 1, block_cols, col_bytes, n_blocks, nc, tail.data(),
                   own::k_group_rows);
            for (int64_t c = 0; c < nc; ++c) {
                std::memcpy(out + (c0 + c) * out_stride + r0, tail.data() + c * own::k_group_rows,
                            sizeof(float) * static_cast<size_t>(n_rows - r0));
            }
        }
    }
}

namespace {

// dst = the first dst->ne[0] rows of the packed matrix x the quantized columns. Threads
// take contiguous ranges of row groups, so nth changes no bit.
void gemm_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const OwnMatrix & m = *static_cast<const OwnMatrix *>(userdata);
    const ggml_tensor * cols = dst->src[1];
    const int64_t n_rows = dst->ne[0];
    const int64_t groups = own::n_groups(n_rows);
    own_gemm_groups(m, n_rows, groups * ith / nth, groups * (ith + 1) / nth, static_cast<const uint8_t *>(cols->data),
                    cols->nb[1], dst->ne[1], static_cast<float *>(dst->data), dst->nb[1] / sizeof(float));
}

// Row groups per piece of a matrix that one packing thread takes at a time: small enough
// that the threads end together, large enough to stream (256 rows).
constexpr int64_t k_pack_piece_groups = 32;

// Gives the whole pages inside [data, data + size) of a read-only mapping back to the
// system; a later read maps them from the file again.
void release_pages(const void * data, size_t size) {
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
    const auto end = (reinterpret_cast<uintptr_t>(data) + size) / page * page;
    if (end > begin) {
        madvise(reinterpret_cast<void *>(begin), end - begin, MADV_DONTNEED);
    }
}

}  // namespace

ggml_tensor * OwnInputs::quantized(ggml_context * ctx, ggml_tensor * cur, own::ActFormat format) {
    ggml_tensor *& node = nodes_[{cur, format}];
    if (!node) {
        ggml_tensor * args[] = {cur};
        void * format_tag = const_cast<own::ActFormat *>(&k_formats[format == own::ActFormat::q8_256 ? 0 : 1]);
        node = ggml_custom_4d(ctx, GGML_TYPE_I8, static_cast<int64_t>(own::act_column_bytes(format, cur->ne[0])),
                              cur->ne[1], 1, 1, args, 1, quantize_op, GGML_N_TASKS_MAX, format_tag);
    }
    return node;
}

ggml_tensor * own_mul_mat(ggml_context * ctx, const OwnMatrix & m, ggml_tensor * cur, int64_t n_rows,
                          OwnInputs & inputs) {
    if (cur->type != GGML_TYPE_F32 || cur->nb[0] != sizeof(float) || cur->ne[0] != m.n_in || cur->ne[2] != 1 ||
        cur->ne[3] != 1 || n_rows <= 0 || n_rows > m.n_rows) {
        throw Error(std::string("own_mul_mat cannot multiply ") + ggml_get_name(m.packed) + " by " +
                    ggml_get_name(cur));
    }
    ggml_tensor * gemm_args[] = {m.packed, inputs.quantized(ctx, cur, m.layout->act)};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, n_rows, cur->ne[1], 1, 1, gemm_args, 2, gemm_op, GGML_N_TASKS_MAX,
                          const_cast<OwnMatrix *>(&m));
}

bool own_mul_mat_supports(const ggml_tensor * w) {
    const own::TypeLayout * layout = own::layout_of(w->type);
    return layout && w->view_src == nullptr && w->buffer && ggml_backend_buffer_is_host(w->buffer) &&
           w->extra == nullptr && w->ne[2] == 1 && w->ne[3] == 1 && w->ne[0] % layout->block == 0 &&
           w->nb[0] == ggml_type_size(w->type);
}

void OwnMatrices::pack(const std::vector<ggml_tensor **> & tensors,
                       const std::vector<ggml_backend_buffer_t> & host_buffers, const std::vector<ggml_type> & types,
                       const own::Kernels & kernels, bool mapped, int n_threads) {
    std::vector<ggml_tensor *> chosen;
    for (ggml_tensor ** slot : tensors) {
        ggml_tensor * w = *slot;
        if (std::find(host_buffers.begin(), host_buffers.end(), w->buffer) == host_buffers.end() ||
            std::find(types.begin(), types.end(), w->type) == types.end() || !own_mul_mat_supports(w) ||
            std::find(chosen.begin(), chosen.end(), w) != chosen.end()) {   // one matrix in two slots: once
            continue;
        }
        chosen.push_back(w);
    }
    if (chosen.empty()) {
        return;
    }
    kernels_ = &kernels;
    ctx_ = new_metadata_context(chosen.size());
    for (ggml_tensor * w : chosen) {
        OwnMatrix m;
        m.layout = own::layout_of(w->type);
        m.kernels = &kernels;
        m.n_in = w->ne[0];
        m.n_rows = w->ne[1];
        m.packed = ggml_new_tensor_1d(ctx_.get(), GGML_TYPE_I8,
                                      static_cast<int64_t>(own::packed_size(*m.layout, m.n_in, m.n_rows)));
        ggml_format_name(m.packed, "%s (own)", w->name);
        matrices_[w] = m;
    }
    buffer_.reset(ggml_backend_alloc_ctx_tensors_from_buft(ctx_.get(), ggml_backend_cpu_buffer_type()));
    if (!buffer_) {
        throw Error("cannot allocate memory for the packed matrices");
    }
    ggml_backend_buffer_set_usage(buffer_.get(), GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    // Each matrix in pieces of whole row groups; thread t of n packs pieces t, t + n, ...,
    // so each matrix's pieces are spread over every thread, the same way each time (and
    // every thread packs where there are as many pieces). own::pack of a piece's rows
    // writes exactly its groups' bytes of the whole matrix's packing (groups are packed
    // one after the other, each from its own 8 rows): the bytes do not depend on n.
    struct Piece {
        size_t matrix;   // index in `chosen`
        int64_t first_group, n_groups;
    };
    std::vector<Piece> pieces;
    std::vector<std::atomic<int64_t>> pieces_left(chosen.size());
    for (size_t i = 0; i < chosen.size(); ++i) {
        const int64_t groups = own::n_groups(chosen[i]->ne[1]);
        for (int64_t g = 0; g < groups; g += k_pack_piece_groups) {
            pieces.push_back({i, g, std::min(k_pack_piece_groups, groups - g)});
        }
        pieces_left[i] = (groups + k_pack_piece_groups - 1) / k_pack_piece_groups;
    }
    const size_t n = std::clamp<size_t>(static_cast<size_t>(std::max(n_threads, 1)), 1, pieces.size());
    const auto work = [&](size_t t) {
        for (size_t p = t; p < pieces.size(); p += n) {
            const Piece & piece = pieces[p];
            const ggml_tensor * w = chosen[piece.matrix];
            const OwnMatrix & m = matrices_.find(w)->second;
            const int64_t r0 = piece.first_group * own::k_group_rows;
            const size_t group_bytes = own::packed_size(*m.layout, m.n_in, own::k_group_rows);
            own::pack(*m.layout, static_cast<const uint8_t *>(w->data) + r0 * w->nb[1], w->nb[1], m.n_in,
                      std::min(piece.n_groups * own::k_group_rows, m.n_rows - r0),
                      static_cast<uint8_t *>(m.packed->data) + piece.first_group * group_bytes);
            if (--pieces_left[piece.matrix] == 0 && mapped) {  // the matrix's last piece: its pages are read no more
                release_pages(w->data, ggml_nbytes(w));
            }
        }
    };
    std::vector<std::thread> threads;
    size_t started = 1;
    for (; started < n; ++started) {
        try {
            threads.emplace_back(work, started);
        } catch (const std::system_error &) {  // no more threads to be had
            break;
        }
    }
    work(0);
    for (size_t t = started; t < n; ++t) {  // the shares of threads that did not start
        work(t);
    }
    for (std::thread & t : threads) {
        t.join();
    }
}

const OwnMatrix * OwnMatrices::find(const ggml_tensor * w) const {
    // a view of a matrix's first rows (a head cut to the vocabulary it exits with)
    const bool first_rows = w->view_src && w->view_offs == 0 && w->nb[1] == w->view_src->nb[1];
    const auto found = matrices_.find(first_rows ? w->view_src : w);
    return found == matrices_.end() ? nullptr : &found->second;
}

std::map<std::string, size_t> OwnMatrices::counts() const {
    std::map<std::string, size_t> counts;
    for (const auto & [w, m] : matrices_) {
        ++counts[ggml_type_name(m.layout->type)];
    }
    return counts;
}

}  // namespace river
