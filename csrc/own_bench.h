// Microbenchmarks of our own products on the calling thread, for a roofline
// (benchmarks/kernel_roofline.py): the peak rate of each kernel set's dot-product
// instruction, and the time of one product as gemm_op computes it. Measures only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ggml.h"
#include "own_quant.h"

namespace river::own {

struct InstructionPeak {
    std::string instruction;   // e.g. "vpdpbusd ymm"
    double macs_per_s;         // int8 multiply-adds per second
};

// The peak rate of the dot-product instructions `kernels` multiply with, the one its
// kernels use first (others after it where they are cheap to measure: vpdpbusd on zmm
// beside the kernels' ymm, sdot beside i8mm's smmla); none for the reference. Each is a loop of independent
// accumulator chains, the fastest of runs that take at least `seconds` in all.
std::vector<InstructionPeak> instruction_peaks(const Kernels & kernels, double seconds);

// Seconds of one product of a random [n_in, n_rows] matrix of `type` (packed once) by
// n columns (quantized once) by `kernels`, for each n of n_cols: the fastest of runs of
// repeated products that take at least `seconds` in all, per n.
std::vector<double> product_seconds(const Kernels & kernels, ggml_type type, int64_t n_rows, int64_t n_in,
                                    const std::vector<int64_t> & n_cols, double seconds);

}  // namespace river::own
