// own_quant.h's kernels for x86 with AVX-512 VNNI on 256-bit registers (AVX-512VL):
// vpdpbusd does a u8 x s8 dot product of 4 pairs per lane in one instruction.
#include "own_kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#define OWN_VNNI 1
#include "own_kernels_x86.inc"

namespace river::own {
const Kernels * vnni_kernels() {
    static constexpr Kernels kernels = x86_kernels("avx512vnni");
    return &kernels;
}
}  // namespace river::own
#else
namespace river::own {
const Kernels * vnni_kernels() {
    return nullptr;
}
}  // namespace river::own
#endif
