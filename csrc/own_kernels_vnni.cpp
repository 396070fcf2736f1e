// own_quant.h's kernels for x86 with AVX-512 VNNI on 256-bit registers (AVX-512VL):
// vpdpbusd does a u8 x s8 dot product of 4 pairs per lane in one instruction.
#include "own_kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#define OWN_VNNI 1
#include "own_kernels_x86.inc"

namespace river::own {
const Kernels * vnni_kernels() {
    static const Kernels kernels{"avx512vnni",
                                 group_kernel<Block32<group_q4_0>>,
                                 group_kernel<Q8_0>,
                                 group_kernel<QK_4_5<false>>,
                                 group_kernel<QK_4_5<true>>,
                                 group_kernel<Q6_K>,
                                 group_kernel<Block32<group_q4_1>>,
                                 group_kernel<Block32<group_q5_0>>,
                                 group_kernel<Block32<group_q5_1>>,
                                 group_kernel<Block32<group_iq4_nl>>,
                                 group_kernel<QK_2_3<true>>,
                                 group_kernel<QK_2_3<false>>,
                                 group_kernel<IQ4_XS>};
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
