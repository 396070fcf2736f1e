// One small matrix product through a CPU extra buffer type and through the plain CPU
// layout, so that a probe can tell whether the extra type computes correctly on this
// host. Runs the product, judges nothing: river_cpp/extra_bufts.py runs it in a child
// process (a type that faults takes only the child with it) and compares.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ggml.h"

namespace river {

struct ProbeProduct {
    bool supported = false;    // false: the extra type does not multiply this type and shape
    std::vector<float> plain;  // [n_tokens][n_out], weights in the CPU buffer
    std::vector<float> extra;  // the same, weights in the extra buffer type
};

// Quantizes `weights` (n_out rows of n_in floats) to `type` and multiplies `inputs`
// (n_tokens rows of n_in floats) by it twice on the CPU backend: once from the plain
// CPU buffer, once from the extra buffer type `buft_name`. Throws for an unknown
// buffer type or a row length `type` cannot hold.
ProbeProduct probe_matmul(const std::string & buft_name, ggml_type type, const float * weights, int64_t n_out,
                          int64_t n_in, const float * inputs, int64_t n_tokens, int n_threads);

}  // namespace river
