// Where the CPU backend computes a low-bit matrix fastest: its "extra" buffer types
// repack Q4_0 / IQ4_NL / Q4_K / Q8_0 rows into interleaved blocks that its matmul
// kernels read faster (what llama.cpp uses for its own 4-bit models). Owns the
// repacked copies; does not decide which tensors deserve them.
#pragma once

#include <memory>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "weights.h"

namespace river {

class RepackedTensors {
public:
    RepackedTensors() = default;
    ~RepackedTensors();
    RepackedTensors(const RepackedTensors &) = delete;
    RepackedTensors & operator=(const RepackedTensors &) = delete;

    // Replaces each of *tensors that lives in one of `host_buffers` (the mapped
    // files) by a repacked copy where the CPU backend has a faster layout for its
    // matmul; others stay as they are.
    void repack(const std::vector<ggml_tensor **> & tensors, const std::vector<ggml_backend_buffer_t> & host_buffers);

    // How many tensors repack() replaced.
    size_t count() const { return count_; }

private:
    size_t count_ = 0;
    ggml_context * ctx_ = nullptr;
    std::vector<BufferPtr> buffers_;
};

}  // namespace river
