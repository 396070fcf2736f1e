// pybind11 module river_cpp._core: a thin skin over Engine.
// Converts arrays and errors; holds no logic of its own.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "common.h"
#include "engine.h"

namespace py = pybind11;

namespace {

using IdArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

py::array_t<float> engine_forward(river::Engine & engine, const IdArray & ids, bool last_only) {
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
        engine.forward(id_data, n, last_only, out);
    }
    return logits;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "river-cpp engine (C++ on ggml)";

    static py::exception<river::Error> river_error(m, "RiverError", PyExc_ValueError);
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const river::Error & e) {
            py::set_error(river_error, e.what());
        }
    });

    m.def("set_log_sink", [](py::object sink) {
        if (sink.is_none()) {
            river::set_log_sink(nullptr);
            return;
        }
        river::set_log_sink([sink](river::LogLevel level, const std::string & message) {
            py::gil_scoped_acquire gil;
            sink(static_cast<int>(level), message);
        });
    }, py::arg("sink"), "Route engine log lines to sink(level, message); None silences them.");

    py::class_<river::Engine>(m, "Engine")
        .def(py::init([](const std::string & path, int64_t n_ctx, int64_t n_batch, int n_threads) {
                 river::EngineParams params;
                 params.n_ctx = n_ctx;
                 params.n_batch = n_batch;
                 params.n_threads = n_threads;
                 return std::make_unique<river::Engine>(path, params);
             }),
             py::arg("path"), py::arg("n_ctx"), py::arg("n_batch"), py::arg("n_threads"))
        .def("forward", &engine_forward, py::arg("ids"), py::arg("last_only"))
        .def("rewind", &river::Engine::rewind, py::arg("n_past"))
        .def("reset", &river::Engine::reset)
        .def_property("n_threads", &river::Engine::n_threads, &river::Engine::set_n_threads)
        .def_property_readonly("n_past", &river::Engine::n_past)
        .def_property_readonly("n_ctx", &river::Engine::n_ctx)
        .def_property_readonly("n_layer", [](const river::Engine & e) { return e.hparams().n_layer; })
        .def_property_readonly("n_vocab", [](const river::Engine & e) { return e.hparams().n_vocab; })
        .def_property_readonly("n_embd", [](const river::Engine & e) { return e.hparams().n_embd; })
        .def_property_readonly("arch", [](const river::Engine & e) { return e.hparams().arch; });
}
