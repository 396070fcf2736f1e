#include "own_kernels.h"

#include "common.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
// Linux's AArch64 bits for the dot products and the int8 matrix products, where the libc
// lacks their names
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1 << 13)
#endif
#endif
#if defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

namespace river::own {

namespace {

bool cpu_runs(const Kernels * kernels) {
    if (!kernels) {
        return false;
    }
    const std::string name = kernels->name;
#if defined(__x86_64__) || defined(_M_X64)
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    if (name == "avx2") {
        return avx2;
    }
    if (name == "avx512vnni") {
        return avx2 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl");
    }
#endif
#if defined(__aarch64__)
    // the NEON kernels use the dot-product extension (sdot), which not every aarch64 CPU
    // has; the i8mm ones the int8 matrix products (smmla) too, which fewer have
#if defined(__APPLE__)
    const bool dotprod = true;   // every arm64 Mac has it
#elif defined(__linux__)
    const bool dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#else
    const bool dotprod = false;
#endif
    if (name == "neon") {
        return dotprod;
    }
    if (name == "i8mm") {
#if defined(__APPLE__)
        int i8mm = 0;   // M2 and later; the name is absent before macOS 12
        size_t size = sizeof i8mm;
        return sysctlbyname("hw.optional.arm.FEAT_I8MM", &i8mm, &size, nullptr, 0) == 0 && i8mm != 0;
#elif defined(__linux__)
        return dotprod && (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
#else
        return false;
#endif
    }
#endif
    return false;
}

}  // namespace

std::vector<const Kernels *> kernels_here() {
    std::vector<const Kernels *> here;
    // First is what `auto` takes. i8mm comes after sdot until it is timed on Arm hardware:
    // at pairs of columns its instruction count is about sdot's (docs/DESIGN.md).
    for (const Kernels * kernels : {vnni_kernels(), avx2_kernels(), neon_kernels(), i8mm_kernels()}) {
        if (cpu_runs(kernels)) {
            here.push_back(kernels);
        }
    }
    here.push_back(&reference_kernels());
    return here;
}

const Kernels & kernels_named(const std::string & name) {
    const std::vector<const Kernels *> here = kernels_here();
    if (name == "auto") {
        return *here.front();
    }
    std::string known;
    for (const Kernels * kernels : here) {
        if (name == kernels->name) {
            return *kernels;
        }
        known += (known.empty() ? "" : ", ") + std::string(kernels->name);
    }
    throw Error("no own kernels '" + name + "' on this CPU (it runs: " + known + ")");
}

}  // namespace river::own
