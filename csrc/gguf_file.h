// A GGUF file opened for reading: its validated header (gguf_header.*), a ggml
// metadata context with one tensor per entry, and its bytes, mapped read-only or read
// into memory. Remembers the file's identity so that a change under the mapping is
// caught. Does not interpret hyperparameters (hparams.*) nor place tensors on a
// backend (weights.*). ggml's own GGUF parser never sees the file.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ggml.h"
#include "gguf_header.h"

namespace river {

// What tells one version of a file from another without reading it.
struct FileIdentity {
    dev_t device = 0;
    ino_t inode = 0;
    int64_t size = 0;
    timespec mtime{};
};

class GgufFile {
public:
    // Reads and validates the header, then maps the file read-only (use_mmap) or
    // reads it into memory. Every tensor's bytes lie inside the file.
    GgufFile(const std::string & path, bool use_mmap);
    ~GgufFile();
    GgufFile(const GgufFile &) = delete;
    GgufFile & operator=(const GgufFile &) = delete;

    const std::string & path() const { return path_; }
    size_t file_size() const { return size_; }
    uint8_t * mapping() const { return static_cast<uint8_t *>(addr_); }
    bool mapped() const { return mapped_; }
    const GgufHeader & header() const { return header_; }

    bool has_key(const std::string & key) const { return header_.find(key) != nullptr; }
    std::string get_str(const std::string & key) const;
    uint32_t get_u32(const std::string & key) const;
    // An integer key of any width, range-checked into uint32.
    std::optional<uint32_t> find_u32(const std::string & key) const;
    std::optional<float> find_f32(const std::string & key) const;
    // An array of bools; nullopt when absent or not such an array.
    std::optional<std::vector<bool>> find_bool_array(const std::string & key) const;

    // A tensor of the file (bound to its bytes once weights.* maps them), or nullptr.
    ggml_tensor * find_tensor(const std::string & name) const;
    // Address of a tensor's bytes inside the mapping.
    uint8_t * tensor_data(const std::string & name) const;

    // Throws when the file at path() is no longer the one loaded (another inode,
    // size or modification time): its mapped bytes may have changed. A file read
    // into memory is immune, and never throws here.
    void check_unchanged() const;

private:
    const GgufValue & value(const std::string & key) const;

    struct GgmlDeleter {
        void operator()(ggml_context * c) const { ggml_free(c); }
    };

    std::string path_;
    GgufHeader header_;
    std::unique_ptr<ggml_context, GgmlDeleter> meta_;
    std::unordered_map<std::string, ggml_tensor *> tensors_;
    FileIdentity identity_;
    void * addr_ = nullptr;
    size_t size_ = 0;
    bool mapped_ = true;
};

}  // namespace river
