#include "gguf_header.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "common.h"

namespace river {

namespace {

constexpr uint8_t k_magic[4] = {'G', 'G', 'U', 'F'};
constexpr size_t k_chunk = 1 << 20;

// Smallest encodings, to bound declared counts by the bytes left in the file:
// a key/value is a key length, a type and a one-byte value; a tensor info is a
// name length, n_dims, one dimension, a type and an offset.
constexpr uint64_t k_min_kv_bytes = 8 + 4 + 1;
constexpr uint64_t k_min_tensor_info_bytes = 8 + 4 + 8 + 4 + 8;

size_t scalar_size(gguf_type type) {
    switch (type) {
        case GGUF_TYPE_UINT8:
        case GGUF_TYPE_INT8:
        case GGUF_TYPE_BOOL: return 1;
        case GGUF_TYPE_UINT16:
        case GGUF_TYPE_INT16: return 2;
        case GGUF_TYPE_UINT32:
        case GGUF_TYPE_INT32:
        case GGUF_TYPE_FLOAT32: return 4;
        case GGUF_TYPE_UINT64:
        case GGUF_TYPE_INT64:
        case GGUF_TYPE_FLOAT64: return 8;
        default: return 0;   // string, array, unknown
    }
}

// Sequential reads of a file through a buffer; never past its end, whatever the
// header declares.
class BoundedReader {
public:
    BoundedReader(const std::string & path, int fd, uint64_t size) : path_(path), fd_(fd), size_(size) {}

    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return size_ - pos_; }

    void read(void * dst, uint64_t n, const char * what) {
        require(n, what);
        auto * out = static_cast<uint8_t *>(dst);
        while (n > 0) {
            if (pos_ < buf_start_ || pos_ >= buf_start_ + buf_.size()) {
                fill();
            }
            const uint64_t at = pos_ - buf_start_;
            const uint64_t take = std::min<uint64_t>(n, buf_.size() - at);
            std::memcpy(out, buf_.data() + at, take);
            out += take;
            pos_ += take;
            n -= take;
        }
    }

    template <typename T>
    T read_pod(const char * what) {
        T value;
        read(&value, sizeof(value), what);
        return value;
    }

    void skip(uint64_t n, const char * what) {
        require(n, what);
        pos_ += n;
    }

    std::string read_string(const char * what, uint64_t max_length, bool keep = true) {
        const uint64_t n = read_pod<uint64_t>(what);
        if (n > max_length) {
            throw malformed(std::string(what) + " has length " + std::to_string(n) + ", more than " +
                            std::to_string(max_length));
        }
        if (!keep) {
            skip(n, what);
            return {};
        }
        require(n, what);
        std::string s(static_cast<size_t>(n), '\0');
        read(s.data(), n, what);
        return s;
    }

    Error malformed(const std::string & problem) const { return Error("malformed GGUF " + path_ + ": " + problem); }

    Error truncated(const std::string & what) const {
        return Error("truncated GGUF " + path_ + ": " + what + " at byte " + std::to_string(pos_) +
                     " runs past the end of the file (" + std::to_string(size_) + " bytes)");
    }

private:
    void require(uint64_t n, const char * what) const {
        if (n > remaining()) {
            throw truncated(what);
        }
    }

    void fill() {
        buf_start_ = pos_;
        buf_.resize(static_cast<size_t>(std::min<uint64_t>(k_chunk, size_ - pos_)));
        size_t got = 0;
        while (got < buf_.size()) {
            const ssize_t r = pread(fd_, buf_.data() + got, buf_.size() - got, static_cast<off_t>(pos_ + got));
            if (r < 0 && errno == EINTR) {
                continue;
            }
            if (r <= 0) {
                throw Error("cannot read GGUF " + path_ + " at byte " + std::to_string(pos_ + got) +
                            (r < 0 ? " (" + std::string(std::strerror(errno)) + ")" : " (the file shrank)"));
            }
            got += static_cast<size_t>(r);
        }
    }

    const std::string & path_;
    int fd_;
    uint64_t size_;
    uint64_t pos_ = 0;
    uint64_t buf_start_ = 0;
    std::vector<uint8_t> buf_;
};

GgufValue read_value(BoundedReader & r, gguf_type type, uint64_t max_kept_array, const std::string & key) {
    GgufValue v;
    v.type = type;
    v.elem_type = type;
    if (type == GGUF_TYPE_ARRAY) {
        const auto elem = static_cast<gguf_type>(r.read_pod<uint32_t>("array type"));
        if (elem == GGUF_TYPE_ARRAY || (elem != GGUF_TYPE_STRING && scalar_size(elem) == 0)) {
            throw r.malformed("key '" + printable(key) + "' is an array of unknown or nested type " +
                              std::to_string(static_cast<uint32_t>(elem)));
        }
        v.elem_type = elem;
        v.n = r.read_pod<uint64_t>("array length");
        // every element takes at least its size (a string its 8-byte length)
        const uint64_t min_size = elem == GGUF_TYPE_STRING ? 8 : scalar_size(elem);
        if (v.n > r.remaining() / min_size) {
            throw r.malformed("array '" + printable(key) + "' declares " + std::to_string(v.n) +
                              " elements, more than the " + std::to_string(r.remaining()) + " bytes left can hold");
        }
        v.kept = v.n <= max_kept_array;
    } else if (type != GGUF_TYPE_STRING && scalar_size(type) == 0) {
        throw r.malformed("key '" + printable(key) + "' has unknown value type " +
                          std::to_string(static_cast<uint32_t>(type)));
    }

    if (v.elem_type == GGUF_TYPE_STRING) {
        if (v.kept) {
            v.strings.reserve(static_cast<size_t>(v.n));
        }
        for (uint64_t i = 0; i < v.n; ++i) {
            std::string s = r.read_string("string value", r.remaining(), v.kept);
            if (v.kept) {
                v.strings.push_back(std::move(s));
            }
        }
    } else {
        const uint64_t n_bytes = v.n * scalar_size(v.elem_type);   // bounded above by the bytes left
        if (v.kept) {
            v.bytes.resize(static_cast<size_t>(n_bytes));
            r.read(v.bytes.data(), n_bytes, "value");
        } else {
            r.skip(n_bytes, "array");
        }
    }
    return v;
}

// ggml rejects these types (removed or never stored in files) by a zero block size.
bool known_tensor_type(uint32_t type) {
    return type < GGML_TYPE_COUNT && ggml_blck_size(static_cast<ggml_type>(type)) > 0 &&
           ggml_type_size(static_cast<ggml_type>(type)) > 0;
}

GgufTensorInfo read_tensor_info(BoundedReader & r) {
    GgufTensorInfo t;
    t.name = r.read_string("tensor name", k_max_gguf_key_length);
    if (t.name.empty() || t.name.size() >= GGML_MAX_NAME) {
        throw r.malformed("tensor name '" + printable(t.name) + "' must have 1 to " +
                          std::to_string(GGML_MAX_NAME - 1) + " bytes");
    }
    const std::string who = "tensor '" + printable(t.name) + "'";
    t.n_dims = r.read_pod<uint32_t>("tensor dimension count");
    if (t.n_dims < 1 || t.n_dims > GGML_MAX_DIMS) {
        throw r.malformed(who + " has " + std::to_string(t.n_dims) + " dimensions (1 to " +
                          std::to_string(GGML_MAX_DIMS) + " allowed)");
    }
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < t.n_dims; ++d) {
        t.ne[d] = r.read_pod<int64_t>("tensor dimension");
        if (t.ne[d] <= 0) {
            throw r.malformed(who + " has dimension " + std::to_string(d) + " = " + std::to_string(t.ne[d]) +
                              " (must be positive)");
        }
        if (__builtin_mul_overflow(n_elements, t.ne[d], &n_elements)) {
            throw r.malformed(who + " has more elements than 2^63 (its dimensions overflow)");
        }
    }
    const uint32_t type = r.read_pod<uint32_t>("tensor type");
    if (!known_tensor_type(type)) {
        throw r.malformed(who + " has unknown ggml type " + std::to_string(type));
    }
    t.type = static_cast<ggml_type>(type);
    const int64_t block = ggml_blck_size(t.type);
    if (t.ne[0] % block != 0) {
        throw r.malformed(who + " has rows of " + std::to_string(t.ne[0]) + " elements, not a multiple of the " +
                          std::to_string(block) + "-element blocks of " + ggml_type_name(t.type));
    }
    // ggml_nbytes does this in size_t without checks: here every product is checked.
    uint64_t n_bytes = static_cast<uint64_t>(t.ne[0] / block);
    bool overflow = __builtin_mul_overflow(n_bytes, static_cast<uint64_t>(ggml_type_size(t.type)), &n_bytes);
    for (uint32_t d = 1; d < t.n_dims; ++d) {
        overflow = overflow || __builtin_mul_overflow(n_bytes, static_cast<uint64_t>(t.ne[d]), &n_bytes);
    }
    if (overflow || n_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        throw r.malformed(who + " has a byte size beyond 2^63");
    }
    t.n_bytes = n_bytes;
    t.offset = r.read_pod<uint64_t>("tensor offset");
    return t;
}

uint32_t read_alignment(const BoundedReader & r, const GgufHeader & h) {
    const GgufValue * v = h.find("general.alignment");
    if (!v) {
        return 32;   // GGUF_DEFAULT_ALIGNMENT
    }
    if (v->type != GGUF_TYPE_UINT32) {
        throw r.malformed(std::string("general.alignment must be a uint32, not ") + gguf_type_label(v->type));
    }
    uint32_t alignment;
    std::memcpy(&alignment, v->bytes.data(), sizeof(alignment));
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
        throw r.malformed("general.alignment " + std::to_string(alignment) + " is not a power of two");
    }
    return alignment;
}

}  // namespace

const char * gguf_type_label(gguf_type type) {
    switch (type) {
        case GGUF_TYPE_UINT8: return "uint8";
        case GGUF_TYPE_INT8: return "int8";
        case GGUF_TYPE_UINT16: return "uint16";
        case GGUF_TYPE_INT16: return "int16";
        case GGUF_TYPE_UINT32: return "uint32";
        case GGUF_TYPE_INT32: return "int32";
        case GGUF_TYPE_FLOAT32: return "float32";
        case GGUF_TYPE_BOOL: return "bool";
        case GGUF_TYPE_STRING: return "string";
        case GGUF_TYPE_ARRAY: return "array";
        case GGUF_TYPE_UINT64: return "uint64";
        case GGUF_TYPE_INT64: return "int64";
        case GGUF_TYPE_FLOAT64: return "float64";
        default: return "unknown";
    }
}

std::string printable(const std::string & name) {
    constexpr size_t k_max = 96;
    std::string out;
    for (size_t i = 0; i < name.size() && i < k_max; ++i) {
        const auto c = static_cast<unsigned char>(name[i]);
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            out += static_cast<char>(c);
        } else {
            static const char * hex = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    if (name.size() > k_max) {
        out += "...";
    }
    return out;
}

const GgufValue * GgufHeader::find(const std::string & key) const {
    const auto it = kv_index.find(key);
    return it == kv_index.end() ? nullptr : &kv[it->second].value;
}

const GgufTensorInfo * GgufHeader::find_tensor(const std::string & name) const {
    const auto it = tensor_index.find(name);
    return it == tensor_index.end() ? nullptr : &tensors[it->second];
}

GgufHeader read_gguf_header(const std::string & path, int fd, uint64_t file_size, uint64_t max_kept_array) {
    BoundedReader r(path, fd, file_size);
    GgufHeader h;
    h.file_size = file_size;

    uint8_t magic[4] = {0, 0, 0, 0};
    if (file_size < sizeof(magic)) {
        throw Error("not a GGUF file (bad magic; the file has " + std::to_string(file_size) + " bytes): " + path);
    }
    r.read(magic, sizeof(magic), "magic");
    if (std::memcmp(magic, k_magic, sizeof(magic)) != 0) {
        throw Error("not a GGUF file (bad magic): " + path);
    }
    h.version = r.read_pod<uint32_t>("version");
    if ((h.version & 0xFFFF) == 0 && h.version != 0) {
        throw r.malformed("version " + std::to_string(h.version) +
                          " looks byte-swapped: big-endian GGUF is not supported");
    }
    if (h.version < 2 || h.version > GGUF_VERSION) {
        throw r.malformed("version " + std::to_string(h.version) + " is not supported (2 to " +
                          std::to_string(GGUF_VERSION) + ")");
    }
    const uint64_t n_tensors = r.read_pod<uint64_t>("tensor count");
    const uint64_t n_kv = r.read_pod<uint64_t>("key/value count");
    if (n_kv > k_max_gguf_kv || n_kv > r.remaining() / k_min_kv_bytes) {
        throw r.malformed("key/value count " + std::to_string(n_kv) + " is beyond the limit (" +
                          std::to_string(k_max_gguf_kv) + ") or what the file's " + std::to_string(file_size) +
                          " bytes can hold");
    }
    if (n_tensors > k_max_gguf_tensors || n_tensors > r.remaining() / k_min_tensor_info_bytes) {
        throw r.malformed("tensor count " + std::to_string(n_tensors) + " is beyond the limit (" +
                          std::to_string(k_max_gguf_tensors) + ") or what the file's " + std::to_string(file_size) +
                          " bytes can hold");
    }

    h.kv.reserve(static_cast<size_t>(n_kv));
    for (uint64_t i = 0; i < n_kv; ++i) {
        std::string key = r.read_string("key", k_max_gguf_key_length);
        if (key.empty()) {
            throw r.malformed("key " + std::to_string(i) + " is empty");
        }
        if (h.kv_index.count(key)) {
            throw r.malformed("duplicate key '" + printable(key) + "'");
        }
        const auto type = static_cast<gguf_type>(r.read_pod<uint32_t>("value type"));
        GgufValue value = read_value(r, type, max_kept_array, key);
        h.kv_index.emplace(key, h.kv.size());
        h.kv.push_back({std::move(key), std::move(value)});
    }
    h.alignment = read_alignment(r, h);

    h.tensors.reserve(static_cast<size_t>(n_tensors));
    for (uint64_t i = 0; i < n_tensors; ++i) {
        GgufTensorInfo t = read_tensor_info(r);
        if (h.tensor_index.count(t.name)) {
            throw r.malformed("duplicate tensor '" + printable(t.name) + "'");
        }
        h.tensor_index.emplace(t.name, h.tensors.size());
        h.tensors.push_back(std::move(t));
    }

    // The data section starts at the next multiple of the alignment.
    h.data_offset = r.pos() + (h.alignment - r.pos() % h.alignment) % h.alignment;
    for (GgufTensorInfo & t : h.tensors) {
        const std::string who = "tensor '" + printable(t.name) + "'";
        if (t.offset % h.alignment != 0) {
            throw r.malformed(who + " has offset " + std::to_string(t.offset) + ", not a multiple of the alignment " +
                              std::to_string(h.alignment));
        }
        uint64_t begin = 0, end = 0;
        if (__builtin_add_overflow(h.data_offset, t.offset, &begin) || __builtin_add_overflow(begin, t.n_bytes, &end) ||
            end > file_size) {
            throw Error("truncated GGUF " + path + ": " + who + " (" + std::to_string(t.n_bytes) + " bytes at offset " +
                        std::to_string(t.offset) + " of the data section) ends past the end of the file (" +
                        std::to_string(file_size) + " bytes)");
        }
        t.offset = begin;
    }
    return h;
}

GgufHeader read_gguf_header(const std::string & path, uint64_t max_kept_array) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        throw Error("cannot open GGUF file: " + path + " (" + std::strerror(errno) + ")");
    }
    struct stat st{};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        throw Error("not a regular file: " + path);
    }
    try {
        GgufHeader h = read_gguf_header(path, fd, static_cast<uint64_t>(st.st_size), max_kept_array);
        close(fd);
        return h;
    } catch (...) {
        close(fd);
        throw;
    }
}

}  // namespace river
