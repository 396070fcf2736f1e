// Bindings of check-exact's measurements (exact_check.h): products through a chosen
// kernel and a forward's node outputs. Converts arrays; judges nothing.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "common.h"
#include "engine.h"
#include "exact_check.h"
#include "kv_cache.h"
#include "own_attention.h"
#include "own_kernels.h"
#include "river_build.h"

namespace py = pybind11;

namespace {

using FloatMatrix = py::array_t<float, py::array::c_style | py::array::forcecast>;
using ByteArray = py::array_t<uint8_t, py::array::c_style>;
using IdArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

py::array_t<float> row_products(const std::string & type, const ByteArray & data, int64_t n_out, int64_t n_in,
                                const FloatMatrix & inputs, const std::string & buffer_type, bool exact, int n_threads,
                                const std::string & own) {
    const ggml_type ggml_t = river::river_type_from_name(type);
    if (inputs.ndim() != 2 || inputs.shape(1) != n_in) {
        throw river::Error("row_products needs inputs [n_tokens, n_in]");
    }
    if (static_cast<size_t>(data.size()) != ggml_row_size(ggml_t, n_in) * static_cast<size_t>(n_out)) {
        throw river::Error("row_products: the matrix data is not n_out rows of n_in " + type + " values");
    }
    if (n_threads <= 0) {
        throw river::Error("n_threads must be positive, got " + std::to_string(n_threads));
    }
    std::vector<float> out;
    {
        py::gil_scoped_release release;
        out = river::row_products(ggml_t, data.data(), n_out, n_in, inputs.data(), inputs.shape(0), buffer_type, exact,
                                  n_threads, own);
    }
    return py::array_t<float>(std::vector<py::ssize_t>{inputs.shape(0), n_out}, out.data());
}

// attention_rows of numpy arrays: q [n_tokens, n_head, head] float32, mask [n_tokens,
// n_kv]; k [n_head_kv, n_kv, ...] and v the raw values of their types (own_attention.h):
// F16 (as uint16 bits) k [n_head_kv, n_kv, head] and v [n_head_kv, head, n_kv]; q8_0
// (as bytes) rows of head values, [n_head_kv, n_kv, row bytes], for either.
py::array_t<float> attention_rows(const FloatMatrix & q, const py::array & k_given, const py::array & v_given,
                                  const FloatMatrix & mask, float kq_scale, int n_threads, const std::string & kernels,
                                  const std::string & type_k, const std::string & type_v) {
    const py::array k = py::array::ensure(k_given, py::array::c_style),
                    v = py::array::ensure(v_given, py::array::c_style);
    if (!k || !v) {
        throw river::Error("attention_rows takes numpy arrays of k and v");
    }
    if (q.ndim() != 3 || k.ndim() != 3 || v.ndim() != 3 || mask.ndim() != 2) {
        throw river::Error("attention_rows needs q, k and v of 3 dimensions and a mask of 2");
    }
    const ggml_type tk = river::kv_cache_type("type_k", type_k, q.shape(2)),
                    tv = river::kv_cache_type("type_v", type_v, q.shape(2));
    const river::AttentionShape shape{q.shape(0), q.shape(1), k.shape(0), k.shape(1), q.shape(2)};
    const auto holds = [&](const py::array & a, ggml_type type) {   // a's bytes: n_head_kv * n_kv values' rows
        return static_cast<size_t>(a.nbytes()) == ggml_row_size(type, shape.head) * shape.n_kv * shape.n_head_kv;
    };
    const bool v_fits = tv == GGML_TYPE_F16
                            ? v.shape(0) == shape.n_head_kv && v.shape(1) == shape.head && v.shape(2) == shape.n_kv
                            : v.shape(0) == shape.n_head_kv && v.shape(1) == shape.n_kv;
    const bool k_fits = tk != GGML_TYPE_F16 || k.shape(2) == shape.head;
    if (!k_fits || !v_fits || !holds(k, tk) || !holds(v, tv) || mask.shape(0) != shape.n_tokens ||
        mask.shape(1) != shape.n_kv) {
        throw river::Error("attention_rows: q, k, v and the mask do not fit together");
    }
    std::vector<float> out;
    {
        py::gil_scoped_release release;
        out = river::attention_rows(shape, q.data(), k.data(), tk, v.data(), tv, mask.data(), kq_scale, n_threads,
                                    kernels);
    }
    return py::array_t<float>(std::vector<py::ssize_t>{shape.n_tokens, shape.n_head * shape.head}, out.data());
}

// Runs engine.forward with every named node's output recorded: (logits, [(name,
// values in numpy order)]).
py::tuple trace_forward(river::Engine & engine, const IdArray & ids, bool last_only) {
    if (ids.ndim() != 1) {
        throw river::Error("token ids must be a 1-D sequence");
    }
    const int64_t n = ids.shape(0);
    py::array_t<float> logits({last_only ? int64_t{1} : n, engine.hparams().n_vocab});
    river::NodeTrace trace;
    engine.set_eval_callback(&river::NodeTrace::eval, &trace);
    try {
        py::gil_scoped_release release;
        engine.forward(ids.data(), n, last_only, nullptr, logits.mutable_data());
    } catch (...) {
        engine.set_eval_callback(nullptr, nullptr);
        throw;
    }
    engine.set_eval_callback(nullptr, nullptr);
    py::list nodes;
    for (const river::TracedNode & node : trace.nodes) {
        const std::vector<py::ssize_t> shape{node.ne[3], node.ne[2], node.ne[1], node.ne[0]};
        nodes.append(py::make_tuple(node.name, py::array_t<float>(shape, node.values.data())));
    }
    return py::make_tuple(logits, nodes);
}

// values [n_out, n_in] quantized to `type` by ggml: its raw rows.
py::array_t<uint8_t> quantize_rows(const std::string & type, const FloatMatrix & values) {
    const ggml_type ggml_t = river::river_type_from_name(type);
    if (values.ndim() != 2 || values.shape(1) % ggml_blck_size(ggml_t) != 0 || ggml_quantize_requires_imatrix(ggml_t)) {
        throw river::Error("quantize_rows needs values [n_out, n_in] with n_in a multiple of " +
                           std::to_string(ggml_blck_size(ggml_t)) + " and a type that needs no importance matrix");
    }
    const int64_t n_out = values.shape(0), n_in = values.shape(1);
    py::array_t<uint8_t> out(static_cast<py::ssize_t>(ggml_row_size(ggml_t, n_in) * n_out));
    ggml_quantize_chunk(ggml_t, values.data(), out.mutable_data(), 0, n_out, n_in, nullptr);
    return out;
}

}  // namespace

void bind_exact(py::module_ & m) {
    m.def("row_products", &row_products, py::arg("type"), py::arg("data"), py::arg("n_out"), py::arg("n_in"),
          py::arg("inputs"), py::arg("buffer_type") = "", py::arg("exact") = false, py::arg("n_threads") = 1,
          py::arg("own") = "",
          "inputs @ w.T for the raw matrix w of `type` ([n_out, n_in]): by ggml_mul_mat from the plain layout or "
          "the extra buffer type, by the exact product, or by our own product with the kernels named `own`.");
    m.def("attention_rows", &attention_rows, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask"),
          py::arg("kq_scale"), py::arg("n_threads") = 1, py::arg("kernels") = "auto", py::arg("type_k") = "f16",
          py::arg("type_v") = "f16",
          "softmax(kq_scale q.k + mask) v by our own attention: q [n_tokens, n_head, head] float32, mask "
          "[n_tokens, n_kv] (0 or -inf); k and v of type_k / type_v as a cache holds them: f16 (viewed as "
          "uint16) k [n_head_kv, n_kv, head] and v [n_head_kv, head, n_kv], q8_0 (bytes) rows [n_head_kv, n_kv, "
          "row bytes] for either -> [n_tokens, n_head * head]; by the row kernels named `kernels` "
          "(own_attention_kernels()).");
    m.def("own_attention_kernels", &river::own_attention_kernels,
          "The row kernels of our own attention this CPU runs, the fastest last; they give the same bits.");
    m.def("quantize_rows", &quantize_rows, py::arg("type"), py::arg("values"),
          "values [n_out, n_in] quantized by ggml to `type`: the raw rows, as a GGUF file holds them.");
    m.def(
        "own_kernels",
        [] {
            std::vector<std::string> names;
            for (const river::own::Kernels * kernels : river::own::kernels_here()) {
                names.push_back(kernels->name);
            }
            return names;
        },
        "The own products' kernels this CPU runs, fastest first; 'reference' (the definition) last.");
    m.def("trace_forward", &trace_forward, py::arg("engine"), py::arg("ids"), py::arg("last_only") = false,
          "engine.forward(ids, last_only) with the named nodes' outputs: (logits, [(name, values)]).");
}
