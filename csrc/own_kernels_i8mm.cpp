// own_quant.h's kernels for Arm with the int8 matrix products (Armv8.6's FEAT_I8MM smmla:
// Apple M2 and later, Neoverse V1, N2 and later): own_kernels_arm.inc's, columns in pairs
// by smmla and an odd last column by sdot (which every i8mm CPU has).
// Pairs, not wider tiles: with 4 columns GCC 12 kept a tile's sums on the stack for every
// type. Built for aarch64 where the compiler reaches smmla without a flag (GCC 10 and
// later, clang 16 and later, or a target that has it); elsewhere there is no table.
#include "own_kernels.h"

#if defined(__aarch64__) && \
    (defined(__ARM_FEATURE_MATMUL_INT8) || (!defined(__clang__) && __GNUC__ >= 10) || __clang_major__ >= 16)
#define OWN_I8MM 1
#include "own_kernels_arm.inc"

namespace river::own {
const Kernels * i8mm_kernels() {
    static constexpr Kernels kernels = arm_kernels<MmlaSums<2>, DotSums<1>>("i8mm");
    return &kernels;
}
}  // namespace river::own
#else
namespace river::own {
const Kernels * i8mm_kernels() {
    return nullptr;
}
}  // namespace river::own
#endif
