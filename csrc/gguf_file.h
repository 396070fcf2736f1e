// A GGUF file opened for reading: metadata, tensor table and a read-only mapping.
// Owns the mapping and the gguf/ggml metadata contexts; does not interpret
// hyperparameters (hparams.*) nor place tensors on a backend (weights.*).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "ggml.h"
#include "gguf.h"

namespace river {

class GgufFile {
public:
    // Parses the header with no_alloc (ggml allocates no tensor data), maps the file
    // read-only and checks that every tensor's bytes lie inside it.
    explicit GgufFile(const std::string & path);
    ~GgufFile();
    GgufFile(const GgufFile &) = delete;
    GgufFile & operator=(const GgufFile &) = delete;

    const std::string & path() const { return path_; }
    size_t file_size() const { return size_; }
    uint8_t * mapping() const { return static_cast<uint8_t *>(addr_); }

    bool has_key(const std::string & key) const;
    std::string get_str(const std::string & key) const;
    uint32_t get_u32(const std::string & key) const;
    std::optional<uint32_t> find_u32(const std::string & key) const;
    std::optional<float> find_f32(const std::string & key) const;

    // A tensor of the file (bound to its bytes once weights.* maps them), or nullptr.
    ggml_tensor * find_tensor(const std::string & name) const;
    // Address of a tensor's bytes inside the mapping.
    uint8_t * tensor_data(const std::string & name) const;

    gguf_context * gguf() const { return gguf_.get(); }

private:
    int64_t key_id(const std::string & key) const;

    struct GgufDeleter { void operator()(gguf_context * c) const { gguf_free(c); } };
    struct GgmlDeleter { void operator()(ggml_context * c) const { ggml_free(c); } };

    std::string path_;
    std::unique_ptr<gguf_context, GgufDeleter> gguf_;
    std::unique_ptr<ggml_context, GgmlDeleter> meta_;
    void * addr_ = nullptr;
    size_t size_ = 0;
};

}  // namespace river
