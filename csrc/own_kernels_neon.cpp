// own_quant.h's kernels for Arm with NEON and the dot-product extension (Armv8.2's sdot:
// Apple M1 and later, Neoverse N1 and later): own_kernels_arm.inc's, sdot for every column.
// Tiles of 2 columns (a column's sums take 2 registers; 2 columns and a tile's slot values
// fill the 32), then single columns. Built for aarch64 where the compiler reaches sdot
// without a flag (GCC, clang 16 and later, or a target that has it, as Apple's);
// elsewhere there is no table.
#include "own_kernels.h"

#if defined(__aarch64__) && (defined(__ARM_FEATURE_DOTPROD) || !defined(__clang__) || __clang_major__ >= 16)
#define OWN_I8MM 0
#include "own_kernels_arm.inc"

namespace river::own {
const Kernels * neon_kernels() {
    static constexpr Kernels kernels = arm_kernels<DotSums<2>, DotSums<1>>("neon");
    return &kernels;
}
}  // namespace river::own
#else
namespace river::own {
const Kernels * neon_kernels() {
    return nullptr;
}
}  // namespace river::own
#endif
