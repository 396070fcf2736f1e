// pybind11 module river_cpp.engine._core: a thin skin over Engine.
// Converts arrays and errors; holds no logic of its own.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstring>

#include "buft_probe.h"
#include "common.h"
#include "cpu_layout.h"
#include "devices.h"
#include "engine.h"
#include "river_build.h"

namespace py = pybind11;

void bind_gguf(py::module_ & m);    // bindings_gguf.cpp
void bind_exact(py::module_ & m);   // bindings_exact.cpp
void bind_bench(py::module_ & m);   // bindings_bench.cpp

namespace {

using IdArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

py::array_t<float> engine_forward(river::Engine & engine, const IdArray & ids, bool last_only,
                                  const river::ExitConfig * exit, bool prompt, int64_t seq) {
    if (ids.ndim() != 1) {
        throw river::Error("token ids must be a 1-D sequence");
    }
    const int64_t n = ids.shape(0);
    const int64_t n_rows = last_only ? 1 : n;
    py::array_t<float> logits({n_rows, engine.hparams().n_vocab});
    const int32_t * id_data = ids.data();
    float * out = logits.mutable_data();
    {
        py::gil_scoped_release release;
        engine.forward(id_data, n, last_only, exit, out, prompt, seq);
    }
    return logits;
}

// rows: (seq, ids, last_only, prompt) per sequence -> their logits, in that order
py::list engine_forward_many(river::Engine & engine, const py::list & rows, const river::ExitConfig * exit) {
    std::vector<IdArray> ids;   // kept alive while the engine reads them
    std::vector<py::array_t<float>> logits;
    std::vector<river::SeqRows> seq_rows;
    for (const py::handle & row : rows) {
        const auto [seq, id_list, last_only, prompt] = row.cast<std::tuple<int64_t, py::object, bool, bool>>();
        IdArray array = IdArray::ensure(id_list);
        if (!array || array.ndim() != 1) {
            throw river::Error("token ids must be a 1-D sequence");
        }
        const int64_t n = array.shape(0);
        logits.emplace_back(std::vector<py::ssize_t>{last_only ? 1 : n, engine.hparams().n_vocab});
        seq_rows.push_back({seq, array.data(), n, last_only, prompt, logits.back().mutable_data()});
        ids.push_back(std::move(array));
    }
    {
        py::gil_scoped_release release;
        engine.forward_many(seq_rows, exit);
    }
    py::list out;
    for (auto & l : logits) {
        out.append(l);
    }
    return out;
}

py::tuple engine_read_kv(const river::Engine & engine, int64_t layer, int64_t pos, int64_t n, int64_t seq) {
    const int64_t n_embd_kv = engine.hparams().n_embd_kv();
    py::array_t<float> k({n, n_embd_kv});
    py::array_t<float> v({n, n_embd_kv});
    engine.read_kv(layer, pos, n, k.mutable_data(), v.mutable_data(), seq);
    return py::make_tuple(k, v);
}

py::bytes engine_save_kv(const river::Engine & engine, int64_t n, int64_t seq) {
    std::vector<uint8_t> state;
    {
        py::gil_scoped_release release;
        state = engine.save_kv(n, seq);
    }
    return py::bytes(reinterpret_cast<const char *>(state.data()), state.size());
}

void engine_load_kv(river::Engine & engine, int64_t n, const py::buffer & data, int64_t seq) {
    const py::buffer_info info = data.request();
    if (info.ndim != 1 || info.itemsize != 1 || info.strides[0] != 1) {
        throw river::Error("load_kv takes the bytes save_kv returned (a contiguous byte buffer)");
    }
    py::gil_scoped_release release;
    engine.load_kv(n, static_cast<const uint8_t *>(info.ptr), static_cast<size_t>(info.size), seq);
}

river::ExactMode exact_mode(const std::string & name) {
    if (name == "off") {
        return river::ExactMode::off;
    }
    if (name == "on") {
        return river::ExactMode::on;
    }
    if (name == "bitwise") {
        return river::ExactMode::bitwise;
    }
    throw river::Error("exact must be 'off', 'on' or 'bitwise', got '" + name + "'");
}

river::ExitConfig make_exit_config(std::vector<float> thresholds, const std::string & signal, int64_t tail_layers,
                                   bool river_head, int64_t exit_vocab) {
    river::ExitConfig config;
    config.thresholds = std::move(thresholds);
    if (signal == "cosine") {
        config.signal = river::StateSignal::cosine;
    } else if (signal == "update_norm") {
        config.signal = river::StateSignal::update_norm;
    } else {
        throw river::Error("unknown exit signal '" + signal + "' (known: cosine, update_norm)");
    }
    for (float t : config.thresholds) {
        if (std::isnan(t)) {
            throw river::Error("exit thresholds must not be NaN");
        }
    }
    if (tail_layers < 0 || exit_vocab < 0) {
        throw river::Error("tail_layers and exit_vocab must be >= 0");
    }
    config.tail_layers = tail_layers;
    config.river_head = river_head;
    config.exit_vocab = exit_vocab;
    return config;
}

void build_river(const river::Engine & engine, const std::vector<std::string> & layer_types,
                 const std::string & head_type, const std::map<std::string, std::string> & metadata,
                 const std::string & out_path, int n_threads, py::object progress) {
    river::RiverSpec spec;
    for (const auto & name : layer_types) {
        spec.layer_types.push_back(river::river_type_from_name(name));
    }
    spec.head_type = river::river_type_from_name(head_type);
    spec.metadata = metadata;
    river::ProgressFn report;
    if (!progress.is_none()) {
        report = [progress](int64_t done, int64_t total) {
            py::gil_scoped_acquire gil;
            progress(done, total);
        };
    }
    py::gil_scoped_release release;
    river::build_river(engine.backbone_file(), engine.hparams(), spec, out_path, n_threads, report);
}

river::Placement make_placement(std::vector<std::string> backbone_layers, std::vector<std::string> river_layers,
                                const std::string & backbone_head, const std::string & river_head,
                                const std::string & kv_cache) {
    river::Placement placement;
    placement.backbone_layers = std::move(backbone_layers);
    placement.river_layers = std::move(river_layers);
    placement.backbone_head = backbone_head;
    placement.river_head = river_head;
    placement.kv_cache = kv_cache;
    return placement;
}

void engine_place(river::Engine & engine, std::vector<std::string> backbone_layers,
                  std::vector<std::string> river_layers, const std::string & backbone_head,
                  const std::string & river_head, const std::string & kv_cache) {
    const river::Placement placement =
        make_placement(std::move(backbone_layers), std::move(river_layers), backbone_head, river_head, kv_cache);
    py::gil_scoped_release release;
    engine.place(placement);
}

py::dict attention_dict(const river::AttentionPlan & plan) {
    py::dict d;
    d["backbone_layers"] = plan.backbone_layers;
    d["river_layers"] = plan.river_layers;
    return d;
}

// A Placement (device names) or PlacementSizes (bytes): one value per placeable part.
template <typename Parts>
py::dict parts_dict(const Parts & p) {
    py::dict d;
    d["backbone_layers"] = p.backbone_layers;
    d["river_layers"] = p.river_layers;
    d["backbone_head"] = p.backbone_head;
    d["river_head"] = p.river_head;
    d["kv_cache"] = p.kv_cache;
    return d;
}

py::dict graph_stats_dict(const river::GraphStats & s) {
    py::dict d;
    d["builds"] = s.builds;
    d["reuses"] = s.reuses;
    d["build_seconds"] = s.build_seconds;
    d["compute_seconds"] = s.compute_seconds;
    d["kept_graphs"] = s.kept_graphs;
    d["kept_bytes"] = s.kept_bytes;
    return d;
}

py::list devices_list(const std::vector<std::string> & rpc_endpoints) {
    py::list out;
    for (const river::DeviceInfo & info : river::list_devices(rpc_endpoints)) {
        py::dict d;
        d["name"] = info.name;
        d["description"] = info.description;
        d["type"] = info.type;
        d["memory_free"] = info.memory_free;
        d["memory_total"] = info.memory_total;
        d["host_ptr_buffers"] = info.host_ptr_buffers;
        out.append(d);
    }
    return out;
}

using FloatMatrix = py::array_t<float, py::array::c_style | py::array::forcecast>;

py::object probe_matmul(const std::string & buffer_type, const std::string & type, const FloatMatrix & weights,
                        const FloatMatrix & inputs, int n_threads) {
    if (weights.ndim() != 2 || inputs.ndim() != 2 || weights.shape(1) != inputs.shape(1)) {
        throw river::Error("probe_matmul needs 2-D weights [n_out, n_in] and inputs [n_tokens, n_in]");
    }
    if (n_threads <= 0) {
        throw river::Error("n_threads must be positive, got " + std::to_string(n_threads));
    }
    const ggml_type ggml_t = river::river_type_from_name(type);
    river::ProbeProduct product;
    {
        py::gil_scoped_release release;
        product = river::probe_matmul(buffer_type, ggml_t, weights.data(), weights.shape(0), weights.shape(1),
                                      inputs.data(), inputs.shape(0), n_threads);
    }
    if (!product.supported) {
        return py::none();
    }
    const std::vector<py::ssize_t> shape{inputs.shape(0), weights.shape(0)};
    return py::make_tuple(py::array_t<float>(shape, product.plain.data()),
                          py::array_t<float>(shape, product.extra.data()));
}

std::vector<std::string> cpu_extra_buffer_type_names() {
    river::load_backends();
    std::vector<std::string> names;
    for (ggml_backend_buffer_type_t buft : river::cpu_extra_buffer_types()) {
        names.emplace_back(ggml_backend_buft_name(buft));
    }
    return names;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "river-cpp engine (C++ on ggml)";

    static py::exception<river::Error> river_error(m, "RiverError", PyExc_ValueError);
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p)
                std::rethrow_exception(p);
        } catch (const river::Error & e) {
            // messages quote names and values from files, which need not be UTF-8
            PyObject * message =
                PyUnicode_DecodeUTF8(e.what(), static_cast<Py_ssize_t>(std::strlen(e.what())), "replace");
            PyErr_SetObject(river_error.ptr(), message);
            Py_XDECREF(message);
        }
    });

    m.def(
        "set_log_sink",
        [](py::object sink) {
            if (sink.is_none()) {
                river::set_log_sink(nullptr);
                return;
            }
            river::set_log_sink([sink](river::LogLevel level, const std::string & message) {
                py::gil_scoped_acquire gil;
                sink(static_cast<int>(level), message);
            });
        },
        py::arg("sink"), "Route engine log lines to sink(level, message); None silences them.");
    // The sink holds a Python callable in a C++ static, destroyed after the interpreter
    // has finalized: dropping it then aborts the process at exit. Drop it while Python runs.
    py::module_::import("atexit").attr("register")(py::cpp_function([] { river::set_log_sink(nullptr); }));

    py::class_<river::ExitConfig>(m, "ExitConfig",
                                  "When and how tokens leave the backbone: built once per policy, handed to forward.")
        .def(py::init(&make_exit_config), py::arg("thresholds"), py::arg("signal") = "cosine",
             py::arg("tail_layers") = 0, py::arg("river_head") = false, py::arg("exit_vocab") = 0)
        .def_readonly("thresholds", &river::ExitConfig::thresholds)
        .def_readonly("tail_layers", &river::ExitConfig::tail_layers)
        .def_readonly("river_head", &river::ExitConfig::river_head)
        .def_readonly("exit_vocab", &river::ExitConfig::exit_vocab);

    py::class_<river::Engine>(m, "Engine")
        .def(py::init([](const std::string & path, int64_t n_ctx, int64_t n_batch, int n_threads, bool use_mmap,
                         std::vector<std::string> cpu_extra_bufts, bool reuse_graphs, const std::string & exact,
                         int64_t exact_rows, std::vector<std::string> own_types, const std::string & own_kernels,
                         int64_t n_seq, bool own_attention, const std::string & type_k, const std::string & type_v) {
                 river::EngineParams params;
                 params.own_attention = own_attention;
                 params.type_k = type_k;
                 params.type_v = type_v;
                 params.n_seq = n_seq;
                 params.reuse_graphs = reuse_graphs;
                 params.exact = exact_mode(exact);
                 params.exact_rows = exact_rows;
                 params.n_ctx = n_ctx;
                 params.n_batch = n_batch;
                 params.n_threads = n_threads;
                 params.use_mmap = use_mmap;
                 params.cpu_extra_bufts = std::move(cpu_extra_bufts);
                 params.own_types = std::move(own_types);
                 params.own_kernels = own_kernels;
                 return std::make_unique<river::Engine>(path, params);
             }),
             py::arg("path"), py::arg("n_ctx"), py::arg("n_batch"), py::arg("n_threads"), py::arg("use_mmap") = true,
             py::arg("cpu_extra_bufts") = std::vector<std::string>{}, py::arg("reuse_graphs") = true,
             py::arg("exact") = "on", py::arg("exact_rows") = river::EngineParams{}.exact_rows,
             py::arg("own_types") = std::vector<std::string>{}, py::arg("own_kernels") = "auto", py::arg("n_seq") = 1,
             py::arg("own_attention") = river::EngineParams{}.own_attention,
             py::arg("type_k") = river::EngineParams{}.type_k, py::arg("type_v") = river::EngineParams{}.type_v)
        .def("forward", &engine_forward, py::arg("ids"), py::arg("last_only"), py::arg("exit") = py::none(),
             py::arg("prompt") = false, py::arg("seq") = 0,
             "Append ids to sequence `seq` and return their logits; tokens leave the backbone as `exit` (an "
             "ExitConfig) says, None: the full backbone. prompt: the ids are a prompt (see "
             "EngineParams::exact_rows).")
        .def("forward_many", &engine_forward_many, py::arg("rows"), py::arg("exit") = py::none(),
             "Several sequences' tokens in one batch: rows of (seq, ids, last_only, prompt), each sequence at "
             "most once; their logits, in that order, each row as its sequence alone computes it. exit: None "
             "(the full backbone) or a configuration that exits at depth 0.")
        .def(
            "decides_by_check",
            [](const river::Engine & e, const river::ExitConfig & exit) {
                e.check_exit(exit);
                return e.decides_by_check(exit);
            },
            py::arg("exit"),
            "Whether a forward under `exit` decides its depth by a similarity check over its batch, so that it "
            "cannot share a batch with other sequences (forward_many).")
        .def("load_river", &river::Engine::load_river, py::arg("path"))
        .def_property_readonly("has_river", &river::Engine::has_river)
        .def("check_files", &river::Engine::check_files,
             "Raise RiverError when the backbone or river file changed on disk since it was mapped.")
        .def("lose_device", &river::Engine::lose_device, py::arg("name"),
             "The device `name` has gone: forward raises from then on, and the engine leaks what lives there.")
        .def("check_exit", &river::Engine::check_exit, py::arg("exit"),
             "Raise RiverError unless `exit` fits this model.")
        .def_property_readonly("last_exit_layers",
                               [](const river::Engine & e) {
                                   const auto & layers = e.last_exit_layers();
                                   return py::array_t<int32_t>(static_cast<py::ssize_t>(layers.size()), layers.data());
                               })
        .def_property_readonly("last_similarities",
                               [](const river::Engine & e) {
                                   const auto & values = e.last_similarities();
                                   return py::array_t<float>(static_cast<py::ssize_t>(values.size()), values.data());
                               })
        .def("place", &engine_place, py::arg("backbone_layers"), py::arg("river_layers"), py::arg("backbone_head"),
             py::arg("river_head"), py::arg("kv_cache"),
             "Put weights and cache on the named devices ('CPU': the host); once, before the first forward.")
        .def(
            "attention_plan",
            [](const river::Engine & e, std::vector<std::string> backbone_layers, std::vector<std::string> river_layers,
               const std::string & backbone_head, const std::string & river_head, const std::string & kv_cache) {
                return attention_dict(e.attention_plan(make_placement(
                    std::move(backbone_layers), std::move(river_layers), backbone_head, river_head, kv_cache)));
            },
            py::arg("backbone_layers"), py::arg("river_layers"), py::arg("backbone_head"), py::arg("river_head"),
            py::arg("kv_cache"),
            "Which attention each layer would take under this placement (place()'s arguments): "
            "{'backbone_layers': [reason], 'river_layers': [reason]}, each why ggml's attention takes the layer, "
            "'' where our own does.")
        .def_property_readonly(
            "attention", [](const river::Engine & e) { return attention_dict(e.attention()); },
            "attention_plan of the placement applied (empty lists before place()).")
        .def_property_readonly("placed", &river::Engine::placed)
        .def_property_readonly("placement", [](const river::Engine & e) { return parts_dict(e.placement()); })
        .def_property_readonly("repacked_tensors", &river::Engine::repacked_tensors)
        .def_property_readonly("repacked_by_buffer_type", &river::Engine::repacked_by_buffer_type)
        .def_property_readonly(
            "own_products", [](const river::Engine & e) { return e.own_matrices().counts(); },
            "How many matrices our own products multiply, by weight type.")
        .def_property_readonly(
            "own_kernels", [](const river::Engine & e) { return e.own_matrices().kernels_name(); },
            "The kernels our own products run on ('' where no matrix takes them).")
        .def("placement_sizes", [](const river::Engine & e) { return parts_dict(e.placement_sizes()); })
        .def("placed_bytes", &river::Engine::placed_bytes)
        .def_property_readonly("graph_stats", [](const river::Engine & e) { return graph_stats_dict(e.graph_stats()); })
        .def("reset_graph_stats", &river::Engine::reset_graph_stats)
        .def_property_readonly("fallback_ops", &river::Engine::fallback_ops)
        .def_property_readonly("reuse_graphs", &river::Engine::reuse_graphs)
        .def("read_kv", &engine_read_kv, py::arg("layer"), py::arg("pos"), py::arg("n"), py::arg("seq") = 0)
        .def("save_kv", &engine_save_kv, py::arg("n"), py::arg("seq") = 0,
             "A sequence's first n positions, every layer's K and V (the river's rows among them), as bytes.")
        .def("load_kv", &engine_load_kv, py::arg("n"), py::arg("data"), py::arg("seq") = 0,
             "Put back what save_kv(n) returned: the sequence then holds those n positions.")
        .def("rewind", &river::Engine::rewind, py::arg("n_past"), py::arg("seq") = 0)
        .def("reset", &river::Engine::reset, py::arg("seq") = 0)
        .def("seq_n_past", &river::Engine::n_past, py::arg("seq"), "Positions sequence `seq` holds.")
        .def_property_readonly("n_seq", &river::Engine::n_seq)
        .def_property_readonly("type_k", [](const river::Engine & e) { return ggml_type_name(e.type_k()); })
        .def_property_readonly("type_v", [](const river::Engine & e) { return ggml_type_name(e.type_v()); })
        .def_property_readonly("kv_bytes", &river::Engine::kv_bytes,
                               "The bytes the KV cache holds, as allocated (0 before place()).")
        .def_property("n_threads", &river::Engine::n_threads, &river::Engine::set_n_threads)
        .def_property_readonly("n_past", [](const river::Engine & e) { return e.n_past(0); })
        .def_property_readonly("n_ctx", &river::Engine::n_ctx)
        .def_property_readonly("n_layer", [](const river::Engine & e) { return e.hparams().n_layer; })
        .def_property_readonly("n_vocab", [](const river::Engine & e) { return e.hparams().n_vocab; })
        .def_property_readonly("n_embd", [](const river::Engine & e) { return e.hparams().n_embd; })
        .def_property_readonly("arch", [](const river::Engine & e) { return e.hparams().arch; })
        .def_property_readonly("n_embd_kv", [](const river::Engine & e) { return e.hparams().n_embd_kv(); });

    m.def("build_river", &build_river, py::arg("engine"), py::arg("layer_types"), py::arg("head_type"),
          py::arg("metadata"), py::arg("out_path"), py::arg("n_threads"), py::arg("progress") = py::none(),
          "Quantize the engine's backbone matrices into a river GGUF at out_path.");
    bind_gguf(m);
    bind_exact(m);
    bind_bench(m);
    m.def("devices", &devices_list, py::arg("rpc_endpoints") = std::vector<std::string>{},
          "The devices ggml offers (of the RPC ones, those of rpc_endpoints): offloading ones first, the CPU last.");
    m.def("cpu_extra_buffer_types", &cpu_extra_buffer_type_names,
          "Names of the CPU device's extra buffer types (AMX, CPU_REPACK, ...), in ggml's order of preference.");
    m.def(
        "ggml_version",
        []() {
            py::dict d;
            d["version"] = ggml_version();
            d["commit"] = ggml_commit();
            return d;
        },
        "The version and commit of the ggml this process runs.");
    m.def("probe_matmul", &probe_matmul, py::arg("buffer_type"), py::arg("type"), py::arg("weights"), py::arg("inputs"),
          py::arg("n_threads") = 1,
          "inputs @ quantized(weights).T from the plain CPU buffer and from the extra buffer type; None where it "
          "does not multiply that type.");
    m.def("graph_architectures", &river::graph_architectures,
          "The general.architecture values river-cpp's own graph builds (others run on llama.cpp's).");
    m.def("backends", &river::backend_names, "The registered ggml backends, in registration order.");
    m.def("cpu_features", &river::cpu_features,
          "The CPU backend's features as (name, value) pairs, e.g. (\"AVX2\", \"1\").");
    m.def("has_rpc", &river::has_rpc, "Whether this ggml has the RPC backend.");
    m.def("add_rpc_server", &river::add_rpc_server, py::arg("endpoint"),
          "Add the devices of the RPC server at host:port (the caller checks that it answers).");
    m.def(
        "serve_rpc",
        [](const std::string & endpoint, int n_threads) {
            py::gil_scoped_release release;
            river::serve_rpc(endpoint, n_threads);
        },
        py::arg("endpoint"), py::arg("n_threads"), "Serve this machine's CPU to RPC clients; does not return.");
    m.def(
        "river_type_name",
        [](const std::string & name) { return std::string(ggml_type_name(river::river_type_from_name(name))); },
        py::arg("name"), "Canonical ggml name of a river type; raises RiverError for unusable types.");
}
