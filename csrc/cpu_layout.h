// Where the CPU backend computes a low-bit matrix fastest: its "extra" buffer types
// repack Q4_0 / IQ4_NL / Q4_K / Q8_0 rows into interleaved blocks that its matmul
// kernels read faster (what llama.cpp uses for its own 4-bit models). Owns the
// repacked copies; does not decide which extra types this host may use (Python's
// probe does, river_cpp/extra_bufts.py) nor which tensors deserve them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "weights.h"

namespace river {

// The CPU device's extra buffer types (AMX, CPU_REPACK, ...), in ggml's order of
// preference; empty without a CPU device or where its backend has none.
std::vector<ggml_backend_buffer_type_t> cpu_extra_buffer_types();

// The extra buffer type called `name`; throws naming those there are.
ggml_backend_buffer_type_t cpu_extra_buffer_type(const std::string & name);

class RepackedTensors {
public:
    RepackedTensors() = default;
    ~RepackedTensors();
    RepackedTensors(const RepackedTensors &) = delete;
    RepackedTensors & operator=(const RepackedTensors &) = delete;

    // Replaces each of *tensors that lives in one of `host_buffers` (the mapped
    // files) by a repacked copy where the CPU backend has a faster layout for its
    // matmul, using only the extra buffer types named in `allowed`; others stay as
    // they are.
    void repack(const std::vector<ggml_tensor **> & tensors, const std::vector<ggml_backend_buffer_t> & host_buffers,
                const std::vector<std::string> & allowed);

    // How many tensors repack() replaced.
    size_t count() const { return count_; }
    // How many it placed in each extra buffer type, by the type's name.
    const std::map<std::string, size_t> & counts() const { return counts_; }

private:
    size_t count_ = 0;
    std::map<std::string, size_t> counts_;
    ggml_context * ctx_ = nullptr;
    std::vector<BufferPtr> buffers_;
};

}  // namespace river
