#include "gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "common.h"

namespace river {

namespace {

const uint8_t k_gguf_magic[4] = {'G', 'G', 'U', 'F'};

// Reads the first bytes ourselves so that "not a GGUF" is told apart from
// "a GGUF whose header is damaged".
void check_magic(const std::string & path, int fd, size_t size) {
    uint8_t magic[4] = {0, 0, 0, 0};
    if (size < sizeof(magic) || pread(fd, magic, sizeof(magic), 0) != (ssize_t) sizeof(magic) ||
        std::memcmp(magic, k_gguf_magic, sizeof(magic)) != 0) {
        throw Error("not a GGUF file (bad magic): " + path);
    }
}

}  // namespace

GgufFile::GgufFile(const std::string & path) : path_(path) {
    const int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) {
        throw Error("cannot open model file: " + path + " (" + std::strerror(errno) + ")");
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        throw Error("not a regular file: " + path);
    }
    size_ = static_cast<size_t>(st.st_size);
    try {
        check_magic(path, fd, size_);
    } catch (...) {
        close(fd);
        throw;
    }

    ggml_context * meta = nullptr;
    gguf_init_params params{/*no_alloc =*/ true, /*ctx =*/ &meta};
    gguf_.reset(gguf_init_from_file(path.c_str(), params));
    meta_.reset(meta);
    if (!gguf_) {
        close(fd);
        throw Error("malformed or truncated GGUF header: " + path);
    }

    addr_ = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (addr_ == MAP_FAILED) {
        addr_ = nullptr;
        throw Error("cannot map model file: " + path);
    }

    // ggml's parser trusts the tensor table; a truncated download would otherwise
    // surface as a read past the end of the mapping (SIGBUS), not as an error.
    const size_t data_offset = gguf_get_data_offset(gguf_.get());
    for (int64_t i = 0; i < gguf_get_n_tensors(gguf_.get()); ++i) {
        const size_t begin = data_offset + gguf_get_tensor_offset(gguf_.get(), i);
        const size_t nbytes = gguf_get_tensor_size(gguf_.get(), i);
        if (begin > size_ || nbytes > size_ - begin) {
            throw Error("truncated GGUF: tensor '" + std::string(gguf_get_tensor_name(gguf_.get(), i)) +
                        "' ends at byte " + std::to_string(begin + nbytes) + " but the file has " +
                        std::to_string(size_) + " bytes: " + path);
        }
    }
}

GgufFile::~GgufFile() {
    if (addr_) {
        munmap(addr_, size_);
    }
}

int64_t GgufFile::key_id(const std::string & key) const {
    const int64_t id = gguf_find_key(gguf_.get(), key.c_str());
    if (id < 0) {
        throw Error("missing GGUF key '" + key + "' in " + path_);
    }
    return id;
}

bool GgufFile::has_key(const std::string & key) const {
    return gguf_find_key(gguf_.get(), key.c_str()) >= 0;
}

std::string GgufFile::get_str(const std::string & key) const {
    const int64_t id = key_id(key);
    if (gguf_get_kv_type(gguf_.get(), id) != GGUF_TYPE_STRING) {
        throw Error("GGUF key '" + key + "' is not a string in " + path_);
    }
    return gguf_get_val_str(gguf_.get(), id);
}

std::optional<uint32_t> GgufFile::find_u32(const std::string & key) const {
    const int64_t id = gguf_find_key(gguf_.get(), key.c_str());
    if (id < 0) {
        return std::nullopt;
    }
    switch (gguf_get_kv_type(gguf_.get(), id)) {
        case GGUF_TYPE_UINT32: return gguf_get_val_u32(gguf_.get(), id);
        case GGUF_TYPE_INT32:  return static_cast<uint32_t>(gguf_get_val_i32(gguf_.get(), id));
        case GGUF_TYPE_UINT64: return static_cast<uint32_t>(gguf_get_val_u64(gguf_.get(), id));
        default: throw Error("GGUF key '" + key + "' is not an integer in " + path_);
    }
}

uint32_t GgufFile::get_u32(const std::string & key) const {
    const auto value = find_u32(key);
    if (!value) {
        throw Error("missing GGUF key '" + key + "' in " + path_);
    }
    return *value;
}

std::optional<float> GgufFile::find_f32(const std::string & key) const {
    const int64_t id = gguf_find_key(gguf_.get(), key.c_str());
    if (id < 0) {
        return std::nullopt;
    }
    if (gguf_get_kv_type(gguf_.get(), id) != GGUF_TYPE_FLOAT32) {
        throw Error("GGUF key '" + key + "' is not a float32 in " + path_);
    }
    return gguf_get_val_f32(gguf_.get(), id);
}

ggml_tensor * GgufFile::find_tensor(const std::string & name) const {
    return ggml_get_tensor(meta_.get(), name.c_str());
}

uint8_t * GgufFile::tensor_data(const std::string & name) const {
    const int64_t id = gguf_find_tensor(gguf_.get(), name.c_str());
    if (id < 0) {
        throw Error("missing tensor '" + name + "' in " + path_);
    }
    return mapping() + gguf_get_data_offset(gguf_.get()) + gguf_get_tensor_offset(gguf_.get(), id);
}

}  // namespace river
