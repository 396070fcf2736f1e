#include "gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "common.h"

namespace river {

namespace {

// Arrays the engine reads are per-layer flags; vocabularies are llama.cpp's business.
constexpr uint64_t k_max_kept_array = 1 << 16;
// ggml's CPU buffers want their base aligned (TENSOR_ALIGNMENT); a page is plenty.
constexpr size_t k_memory_alignment = 4096;

struct FdCloser {
    int fd;
    ~FdCloser() { close(fd); }
};

FileIdentity identity_of(const struct stat & st) {
    return {st.st_dev, st.st_ino, static_cast<int64_t>(st.st_size), st.st_mtim};
}

bool same_identity(const FileIdentity & a, const FileIdentity & b) {
    return a.device == b.device && a.inode == b.inode && a.size == b.size && a.mtime.tv_sec == b.mtime.tv_sec &&
           a.mtime.tv_nsec == b.mtime.tv_nsec;
}

void read_all(const std::string & path, int fd, uint8_t * dst, size_t size) {
    size_t got = 0;
    while (got < size) {
        const ssize_t r = pread(fd, dst + got, size - got, static_cast<off_t>(got));
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            throw Error("cannot read model file " + path + " at byte " + std::to_string(got) +
                        (r < 0 ? " (" + std::string(std::strerror(errno)) + ")" : " (the file shrank)"));
        }
        got += static_cast<size_t>(r);
    }
}

template <typename T>
T scalar(const GgufValue & v) {
    T x;
    std::memcpy(&x, v.bytes.data(), sizeof(T));
    return x;
}

}  // namespace

GgufFile::GgufFile(const std::string & path, bool use_mmap) : path_(path), mapped_(use_mmap) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        throw Error("cannot open model file: " + path + " (" + std::strerror(errno) + ")");
    }
    FdCloser closer{fd};
    struct stat st{};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        throw Error("not a regular file: " + path);
    }
    identity_ = identity_of(st);
    if (static_cast<uint64_t>(st.st_size) > std::numeric_limits<size_t>::max()) {
        throw Error("model file too large for this machine: " + path);
    }
    size_ = static_cast<size_t>(st.st_size);
    header_ = read_gguf_header(path, fd, size_, k_max_kept_array);

    // One ggml tensor per entry, shapes already checked, so ggml asserts nothing.
    ggml_init_params params{ggml_tensor_overhead() * std::max<size_t>(1, header_.tensors.size()), nullptr, true};
    meta_.reset(ggml_init(params));
    if (!meta_) {
        throw Error("cannot allocate tensor metadata for " + path);
    }
    for (const GgufTensorInfo & info : header_.tensors) {
        ggml_tensor * t = ggml_new_tensor(meta_.get(), info.type, static_cast<int>(info.n_dims), info.ne);
        ggml_set_name(t, info.name.c_str());
        tensors_.emplace(info.name, t);
    }

    if (use_mmap) {
        addr_ = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
        if (addr_ == MAP_FAILED) {
            addr_ = nullptr;
            throw Error("cannot map model file: " + path + " (" + std::strerror(errno) + ")");
        }
    } else {
        const size_t padded = (size_ + k_memory_alignment - 1) / k_memory_alignment * k_memory_alignment;
        addr_ = std::aligned_alloc(k_memory_alignment, padded);
        if (!addr_) {
            throw Error("cannot allocate " + std::to_string(size_) + " bytes to read model file " + path);
        }
        try {
            read_all(path, fd, static_cast<uint8_t *>(addr_), size_);
        } catch (...) {
            std::free(addr_);
            addr_ = nullptr;
            throw;
        }
    }
}

GgufFile::~GgufFile() {
    if (!addr_) {
        return;
    }
    if (mapped_) {
        munmap(addr_, size_);
    } else {
        std::free(addr_);
    }
}

void GgufFile::check_unchanged() const {
    if (!mapped_) {
        return;
    }
    struct stat st{};
    if (stat(path_.c_str(), &st) != 0) {
        throw Error("model file " + path_ + " is gone or unreadable since it was loaded (" + std::strerror(errno) +
                    "); load the model again");
    }
    const FileIdentity now = identity_of(st);
    if (!same_identity(now, identity_)) {
        throw Error("model file " + path_ + " changed since it was loaded (size " + std::to_string(identity_.size) +
                    " -> " + std::to_string(now.size) + " bytes" +
                    (now.inode != identity_.inode ? ", replaced by another file" : ", modified") +
                    "): its mapped weights may no longer be what was checked at load; load the model again, or "
                    "use use_mmap=False for files that change");
    }
}

const GgufValue & GgufFile::value(const std::string & key) const {
    const GgufValue * v = header_.find(key);
    if (!v) {
        throw Error("missing GGUF key '" + key + "' in " + path_);
    }
    return *v;
}

std::string GgufFile::get_str(const std::string & key) const {
    const GgufValue & v = value(key);
    if (v.type != GGUF_TYPE_STRING) {
        throw Error("GGUF key '" + key + "' is not a string in " + path_);
    }
    return v.strings.at(0);
}

std::optional<uint32_t> GgufFile::find_u32(const std::string & key) const {
    const GgufValue * v = header_.find(key);
    if (!v) {
        return std::nullopt;
    }
    int64_t x = 0;
    switch (v->type) {
        case GGUF_TYPE_UINT8: x = scalar<uint8_t>(*v); break;
        case GGUF_TYPE_INT8: x = scalar<int8_t>(*v); break;
        case GGUF_TYPE_UINT16: x = scalar<uint16_t>(*v); break;
        case GGUF_TYPE_INT16: x = scalar<int16_t>(*v); break;
        case GGUF_TYPE_UINT32: x = scalar<uint32_t>(*v); break;
        case GGUF_TYPE_INT32: x = scalar<int32_t>(*v); break;
        case GGUF_TYPE_INT64: x = scalar<int64_t>(*v); break;
        case GGUF_TYPE_UINT64: {
            const uint64_t u = scalar<uint64_t>(*v);
            x = u > std::numeric_limits<uint32_t>::max() ? -1 : static_cast<int64_t>(u);
            break;
        }
        default: throw Error("GGUF key '" + key + "' is not an integer in " + path_);
    }
    if (x < 0 || x > std::numeric_limits<uint32_t>::max()) {
        throw Error("GGUF key '" + key + "' is out of range (not a uint32) in " + path_);
    }
    return static_cast<uint32_t>(x);
}

uint32_t GgufFile::get_u32(const std::string & key) const {
    const auto v = find_u32(key);
    if (!v) {
        throw Error("missing GGUF key '" + key + "' in " + path_);
    }
    return *v;
}

std::optional<float> GgufFile::find_f32(const std::string & key) const {
    const GgufValue * v = header_.find(key);
    if (!v) {
        return std::nullopt;
    }
    if (v->type != GGUF_TYPE_FLOAT32) {
        throw Error("GGUF key '" + key + "' is not a float32 in " + path_);
    }
    return scalar<float>(*v);
}

std::optional<std::vector<bool>> GgufFile::find_bool_array(const std::string & key) const {
    const GgufValue * v = header_.find(key);
    if (!v || v->type != GGUF_TYPE_ARRAY || v->elem_type != GGUF_TYPE_BOOL || !v->kept) {
        return std::nullopt;
    }
    std::vector<bool> flags(v->bytes.size());
    for (size_t i = 0; i < flags.size(); ++i) {
        flags[i] = v->bytes[i] != 0;
    }
    return flags;
}

ggml_tensor * GgufFile::find_tensor(const std::string & name) const {
    const auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : it->second;
}

uint8_t * GgufFile::tensor_data(const std::string & name) const {
    const GgufTensorInfo * info = header_.find_tensor(name);
    if (!info) {
        throw Error("missing tensor '" + name + "' in " + path_);
    }
    return mapping() + info->offset;
}

}  // namespace river
