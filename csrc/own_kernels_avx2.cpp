// own_quant.h's kernels for x86 with AVX2, FMA and F16C (own_kernels_x86.inc).
#include "own_kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#define OWN_VNNI 0
#include "own_kernels_x86.inc"

namespace river::own {
const Kernels * avx2_kernels() {
    static const Kernels kernels{"avx2",
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
const Kernels * avx2_kernels() {
    return nullptr;
}
}  // namespace river::own
#endif
