// The header of a GGUF file (metadata and tensor table), read by our own bounded
// reader and validated before anything is built from it: every count, length, type,
// shape, size and offset is checked against the file. Owns only the parsed values;
// does not map the file (gguf_file.*) nor know what a model needs (weights.*).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "ggml.h"
#include "gguf.h"

namespace river {

// Bounds on what a header may declare; real models are far below them.
constexpr uint64_t k_max_gguf_kv = 1 << 16;
constexpr uint64_t k_max_gguf_tensors = 1 << 16;
constexpr uint64_t k_max_gguf_key_length = 1 << 16;

// One metadata value. Scalars have n == 1 and elem_type == type.
struct GgufValue {
    gguf_type type = GGUF_TYPE_UINT8;        // GGUF_TYPE_ARRAY for arrays
    gguf_type elem_type = GGUF_TYPE_UINT8;   // the element type (arrays) or the type
    uint64_t n = 1;                          // number of elements
    bool kept = true;                        // false: a long array, validated and skipped
    std::vector<uint8_t> bytes;              // numeric elements, packed little-endian
    std::vector<std::string> strings;        // string elements (a string scalar has one)
};

struct GgufKv {
    std::string key;
    GgufValue value;
};

struct GgufTensorInfo {
    std::string name;
    ggml_type type = GGML_TYPE_F32;
    uint32_t n_dims = 0;
    int64_t ne[GGML_MAX_DIMS] = {1, 1, 1, 1};   // ggml order: ne[0] is the row length
    uint64_t offset = 0;    // of its first byte in the file (data section start included)
    uint64_t n_bytes = 0;
};

struct GgufHeader {
    uint32_t version = 0;
    uint64_t alignment = 32;
    uint64_t data_offset = 0;   // where the data section starts
    uint64_t file_size = 0;
    std::vector<GgufKv> kv;
    std::vector<GgufTensorInfo> tensors;

    // nullptr when absent
    const GgufValue * find(const std::string & key) const;
    const GgufTensorInfo * find_tensor(const std::string & name) const;

    std::unordered_map<std::string, size_t> kv_index;
    std::unordered_map<std::string, size_t> tensor_index;
};

// Arrays longer than max_kept_array are validated but not stored (kept = false).
// Throws river::Error naming `path` and the first problem found.
GgufHeader read_gguf_header(const std::string & path, int fd, uint64_t file_size, uint64_t max_kept_array);

// Opens `path` itself (for inspection without loading anything else).
GgufHeader read_gguf_header(const std::string & path, uint64_t max_kept_array);

// "uint32", "string", "array" ...
const char * gguf_type_label(gguf_type type);

// A name from the file made printable: other bytes as \xNN, long names cut.
std::string printable(const std::string & name);

}  // namespace river
