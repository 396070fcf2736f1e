// test_own_kernels_vnni_emulated.py's check of vnni_emulation.h: its vpdpbusd and vpdpwssd
// against the instructions' definition lane by lane (exact sums, wrapped to 32 bits), on
// random vectors and their extremes. Prints the first lane that differs and fails, or "ok".
#include "vnni_emulation.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

namespace {

// 32-bit two's complement wrapping of an exact sum, as the instructions add
int32_t wrap(int64_t v) {
    return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v)));
}

template <typename T>
__m256i vector_of(const T (&v)[32 / sizeof(T)]) {
    __m256i r;
    std::memcpy(&r, v, sizeof r);
    return r;
}

void lanes_of(__m256i v, int32_t (&out)[8]) {
    std::memcpy(out, &v, sizeof out);
}

// one of an operand's extremes or any value, even odds
template <typename T, size_t N>
T pick(std::mt19937 & rng, const T (&edges)[N]) {
    return rng() % 2 ? edges[rng() % N] : static_cast<T>(rng());
}

}  // namespace

int main() {
    std::mt19937 rng(5);
    // the extremes of each operand, then anything
    const uint8_t u_edges[] = {0, 1, 127, 128, 255};
    const int8_t s_edges[] = {-128, -127, -1, 0, 1, 127};
    const int16_t w_edges[] = {-32768, -32767, -1, 0, 1, 32767};
    const int32_t acc_edges[] = {INT32_MIN, -1, 0, 1, INT32_MAX};
    for (int trial = 0; trial < 100000; ++trial) {
        uint8_t u[32];
        int8_t s[32];
        int16_t a[16], b[16];
        int32_t acc[8];
        for (int i = 0; i < 32; ++i) {
            u[i] = pick(rng, u_edges);
            s[i] = pick(rng, s_edges);
        }
        for (int i = 0; i < 16; ++i) {
            a[i] = pick(rng, w_edges);
            b[i] = pick(rng, w_edges);
        }
        for (int j = 0; j < 8; ++j) {
            acc[j] = pick(rng, acc_edges);
        }
        int32_t bytes[8], words[8];
        lanes_of(river_test::dpbusd(vector_of(acc), vector_of(u), vector_of(s)), bytes);
        lanes_of(river_test::dpwssd(vector_of(acc), vector_of(a), vector_of(b)), words);
        for (int j = 0; j < 8; ++j) {
            int64_t byte_sum = acc[j], word_sum = acc[j];
            for (int k = 0; k < 4; ++k) {
                byte_sum += int64_t{u[4 * j + k]} * s[4 * j + k];
            }
            for (int k = 0; k < 2; ++k) {
                word_sum += int64_t{a[2 * j + k]} * b[2 * j + k];
            }
            if (bytes[j] != wrap(byte_sum) || words[j] != wrap(word_sum)) {
                std::printf("trial %d lane %d: dpbusd %d (defined %d), dpwssd %d (defined %d)\n", trial, j, bytes[j],
                            wrap(byte_sum), words[j], wrap(word_sum));
                return 1;
            }
        }
    }
    std::printf("ok\n");
    return 0;
}
