// own_quant.h's kernels for x86 with AVX2, FMA and F16C (own_kernels_x86.inc).
#include "own_kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#define OWN_VNNI 0
#include "own_kernels_x86.inc"

namespace river::own {
const Kernels * avx2_kernels() {
    static constexpr Kernels kernels = x86_kernels("avx2");
    return &kernels;
}
}  // namespace river::own
#else
namespace river::own {
const Kernels * avx2_kernels() {
    return nullptr;
}
}  // namespace river::own
#endif
