// Bindings of our own products' microbenchmarks (own_bench.h). Converts and checks
// arguments; the GIL is released while they measure, so that a measurement runs alone.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>

#include "common.h"
#include "own_bench.h"
#include "own_kernels.h"
#include "river_build.h"

namespace py = pybind11;

namespace {

void check_seconds(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) {
        throw river::Error("seconds must be a finite number >= 0, got " + std::to_string(seconds));
    }
}

py::list instruction_peaks(const std::string & kernels, double seconds) {
    check_seconds(seconds);
    const river::own::Kernels & chosen = river::own::kernels_named(kernels);
    std::vector<river::own::InstructionPeak> peaks;
    {
        py::gil_scoped_release release;
        peaks = river::own::instruction_peaks(chosen, seconds);
    }
    py::list out;
    for (const river::own::InstructionPeak & peak : peaks) {
        out.append(py::make_tuple(peak.instruction, peak.macs_per_s));
    }
    return out;
}

std::vector<double> product_seconds(const std::string & kernels, const std::string & type, int64_t n_rows, int64_t n_in,
                                    const std::vector<int64_t> & n_cols, double seconds) {
    check_seconds(seconds);
    const river::own::Kernels & chosen = river::own::kernels_named(kernels);
    const ggml_type ggml_t = river::river_type_from_name(type);
    py::gil_scoped_release release;
    return river::own::product_seconds(chosen, ggml_t, n_rows, n_in, n_cols, seconds);
}

}  // namespace

void bind_bench(py::module_ & m) {
    m.def("own_instruction_peaks", &instruction_peaks, py::arg("kernels"), py::arg("seconds") = 0.2,
          "[(instruction, int8 multiply-adds per second)] of the dot-product instructions the own kernels "
          "`kernels` use, on this thread: the kernels' own first; [] for the reference.");
    m.def("own_product_seconds", &product_seconds, py::arg("kernels"), py::arg("type"), py::arg("n_rows"),
          py::arg("n_in"), py::arg("n_cols"), py::arg("seconds") = 0.2,
          "Seconds of one product of a random [n_rows, n_in] matrix of `type` by n columns on this thread, by "
          "the own kernels `kernels`, for each n of n_cols: the fastest of repeated products over `seconds` each.");
}
