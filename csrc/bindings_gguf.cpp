// river_cpp.engine._core.gguf_info: the validated header of a GGUF file as Python values,
// and check_vocabulary. Reads the header only (bounded reads, no mapping, no tensor
// data); holds no logic beyond converting gguf_header.*'s structures.
#include <pybind11/pybind11.h>

#include <cstring>

#include "common.h"
#include "gguf_file.h"
#include "gguf_header.h"
#include "hparams.h"
#include "kv_cache.h"
#include "vocab_check.h"

namespace py = pybind11;

namespace {

// Strings from the file may hold invalid UTF-8 (byte tokens): replaced, not raised.
py::str to_str(const std::string & s) {
    PyObject * o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
    if (!o) {
        throw py::error_already_set();
    }
    return py::reinterpret_steal<py::str>(o);
}

template <typename T>
T element(const river::GgufValue & v, uint64_t i) {
    T x;
    std::memcpy(&x, v.bytes.data() + i * sizeof(T), sizeof(T));
    return x;
}

py::object element_object(const river::GgufValue & v, uint64_t i) {
    switch (v.elem_type) {
        case GGUF_TYPE_UINT8: return py::int_(element<uint8_t>(v, i));
        case GGUF_TYPE_INT8: return py::int_(element<int8_t>(v, i));
        case GGUF_TYPE_UINT16: return py::int_(element<uint16_t>(v, i));
        case GGUF_TYPE_INT16: return py::int_(element<int16_t>(v, i));
        case GGUF_TYPE_UINT32: return py::int_(element<uint32_t>(v, i));
        case GGUF_TYPE_INT32: return py::int_(element<int32_t>(v, i));
        case GGUF_TYPE_UINT64: return py::int_(element<uint64_t>(v, i));
        case GGUF_TYPE_INT64: return py::int_(element<int64_t>(v, i));
        case GGUF_TYPE_FLOAT32: return py::float_(element<float>(v, i));
        case GGUF_TYPE_FLOAT64: return py::float_(element<double>(v, i));
        case GGUF_TYPE_BOOL: return py::bool_(v.bytes[i] != 0);
        case GGUF_TYPE_STRING: return to_str(v.strings[i]);
        default: return py::none();
    }
}

std::string type_label(const river::GgufValue & v) {
    if (v.type == GGUF_TYPE_ARRAY) {
        return std::string("array[") + river::gguf_type_label(v.elem_type) + "]";
    }
    return river::gguf_type_label(v.type);
}

py::dict gguf_info(const std::string & path, int64_t max_array) {
    const uint64_t keep = max_array < 0 ? UINT64_MAX : static_cast<uint64_t>(max_array);
    river::GgufHeader h;
    {
        py::gil_scoped_release release;
        h = river::read_gguf_header(path, keep);
    }
    py::dict metadata, types;
    for (const river::GgufKv & kv : h.kv) {
        const river::GgufValue & v = kv.value;
        py::object value;
        if (v.type != GGUF_TYPE_ARRAY) {
            value = element_object(v, 0);
        } else if (v.kept) {
            py::list items(static_cast<size_t>(v.n));
            for (uint64_t i = 0; i < v.n; ++i) {
                items[static_cast<size_t>(i)] = element_object(v, i);
            }
            value = std::move(items);
        } else {
            py::dict summary;
            summary["element_type"] = river::gguf_type_label(v.elem_type);
            summary["length"] = v.n;
            value = std::move(summary);
        }
        const py::str key = to_str(kv.key);
        metadata[key] = value;
        types[key] = type_label(v);
    }
    py::list tensors;
    for (const river::GgufTensorInfo & t : h.tensors) {
        py::list shape;
        for (uint32_t d = 0; d < t.n_dims; ++d) {
            shape.append(t.ne[d]);
        }
        py::dict info;
        info["name"] = to_str(t.name);
        info["type"] = ggml_type_name(t.type);
        info["shape"] = shape;
        info["n_bytes"] = t.n_bytes;
        info["offset"] = t.offset;
        tensors.append(info);
    }
    py::dict out;
    out["version"] = h.version;
    out["alignment"] = h.alignment;
    out["data_offset"] = h.data_offset;
    out["file_size"] = h.file_size;
    out["metadata"] = metadata;
    out["types"] = types;
    out["tensors"] = tensors;
    return out;
}

}  // namespace

void bind_gguf(py::module_ & m) {
    m.def(
        "kv_cache_bytes",
        [](const std::string & path, int64_t n_ctx, const std::string & type_k, const std::string & type_v) {
            if (n_ctx <= 0) {
                throw river::Error("n_ctx must be positive, got " + std::to_string(n_ctx));
            }
            const river::GgufFile file(path, true);
            const river::HParams hp = river::read_hparams(file);
            return river::KvCache::size_for(hp, n_ctx, 1, river::kv_cache_type("type_k", type_k, hp.n_embd_head),
                                            river::kv_cache_type("type_v", type_v, hp.n_embd_head));
        },
        py::arg("path"), py::arg("n_ctx"), py::arg("type_k") = "f16", py::arg("type_v") = "f16",
        "The bytes of one sequence's KV cache of n_ctx positions, K and V of type_k / type_v, for the graph "
        "backbone of the model at path.");
    m.def("gguf_info", &gguf_info, py::arg("path"), py::arg("max_array") = 1024,
          "The validated header of a GGUF file: metadata, value types and the tensor table.\n\n"
          "Arrays longer than max_array (-1: no limit) are summarised as\n"
          "{'element_type': ..., 'length': n}. Raises RiverError for a malformed file.");
    m.def(
        "check_vocabulary",
        [](const std::string & path) {
            py::gil_scoped_release release;
            river::check_vocabulary_file(path, -1, true);
        },
        py::arg("path"),
        "Raise RiverError unless the file's vocabulary is one llama.cpp can load and\n"
        "tokenize with without aborting (see csrc/vocab_check.cpp).");
}
