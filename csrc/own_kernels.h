// Which of own_quant.h's kernels this CPU runs: each instruction set's table, and the
// choice among them by the CPU's features at run time. Chooses kernels; computes nothing.
#pragma once

#include <string>
#include <vector>

#include "own_quant.h"

namespace river::own {

// Each instruction set's kernels (own_kernels_<isa>.cpp); nullptr where this build has
// none (another architecture).
const Kernels * avx2_kernels();
const Kernels * vnni_kernels();
const Kernels * neon_kernels();
const Kernels * i8mm_kernels();

// The kernels this CPU can run, fastest first; the reference is always last.
std::vector<const Kernels *> kernels_here();

// The kernels called `name` ("auto": the fastest here); throws for one this CPU lacks.
const Kernels & kernels_named(const std::string & name);

}  // namespace river::own
