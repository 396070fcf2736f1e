#include "vocab_check.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common.h"
#include "gguf_header.h"

namespace river {

namespace {

// Read as of llama.cpp's llama-vocab.cpp in llama-cpp-python 0.3.36. What aborts
// there, and the check here that rules it out:
// - duplicate token texts: GGML_ASSERT(id_to_token.size() == token_to_id.size())
//   at load (texts as llama.cpp reads them: cut at a NUL, empty ones renamed);
// - a BYTE token in a WPM vocabulary: GGML_ABORT in token_to_byte at load;
// - BOS, EOS or SEP absent where tokenize adds it: GGML_ASSERT on every tokenize;
// - an SPM byte without a byte token: std::out_of_range out of llama_tokenize;
// - UGM and WPM without an unknown token: -1 in the ids, then std::out_of_range
//   out of llama_token_to_piece; UGM's precompiled_charsmap walked outside its
//   array: std::runtime_error out of llama_tokenize;
// - an RWKV byte without a single-byte token: tokenize restarts at the text's
//   start forever, growing its output until memory runs out;
// - model rows beyond the vocabulary: std::out_of_range out of
//   llama_token_to_piece for a sampled id;
// - a vocabulary of no type (no_vocab, none) or one river-cpp never meets (plamo2,
//   gemma4, hybriddna, whitespace, test): refused rather than read.
// Exceptions inside the load itself are caught by llama.cpp; the checks for those
// (array types and lengths, merges, special ids) give a clear message instead.

enum class VocabType { spm, bpe, wpm, ugm, rwkv };

constexpr int32_t k_null = -1;
constexpr int32_t k_token_type_max = 6;   // llama_token_type: 0 undefined ... 6 byte
constexpr int32_t k_token_type_byte = 6;

struct SpecialKey {
    const char * key;
    int32_t * id;
};

class VocabChecker {
public:
    VocabChecker(const GgufHeader & h, const std::string & path) : h_(h), path_(path) {}

    // true: the file has a vocabulary and it passed; false: it has none (and
    // require is false)
    bool check(int64_t n_vocab, bool require) {
        const GgufValue * model = h_.find("tokenizer.ggml.model");
        if (!model) {
            if (require) {
                fail("there is no tokenizer (tokenizer.ggml.model is missing)");
            }
            return false;
        }
        read_type(*model);
        read_tokens();
        if (n_vocab >= 0 && n_vocab != n_tokens()) {
            fail("the model's embedding and head have " + std::to_string(n_vocab) + " rows but the vocabulary has " +
                 std::to_string(n_tokens()) + " tokens");
        }
        read_scores();
        read_token_types();
        read_special_ids();
        check_added_specials();
        switch (type_) {
            case VocabType::spm: check_byte_fallback(); break;
            case VocabType::bpe: check_merges(); break;
            case VocabType::wpm: break;
            case VocabType::ugm: check_charsmap(); break;
            case VocabType::rwkv: check_rwkv_bytes(); break;
        }
        const GgufValue * chat = h_.find("tokenizer.chat_template");
        if (chat && chat->type != GGUF_TYPE_STRING) {
            fail(std::string("tokenizer.chat_template must be a string, not ") + label(*chat));
        }
        return true;
    }

private:
    [[noreturn]] void fail(const std::string & problem) const {
        throw Error("invalid vocabulary in GGUF " + path_ + ": " + problem);
    }

    static std::string label(const GgufValue & v) {
        return v.type == GGUF_TYPE_ARRAY ? std::string("array of ") + gguf_type_label(v.elem_type)
                                         : gguf_type_label(v.type);
    }

    // llama.cpp reads GGUF strings through C strings: a NUL ends them.
    static std::string as_read(const std::string & s) { return s.substr(0, std::strlen(s.c_str())); }

    int32_t n_tokens() const { return static_cast<int32_t>(texts_.size()); }

    const GgufValue * array(const char * key, bool required) const {
        const GgufValue * v = h_.find(key);
        if (!v) {
            if (required) {
                fail(std::string(key) + " is missing");
            }
            return nullptr;
        }
        if (v->type != GGUF_TYPE_ARRAY) {
            fail(std::string(key) + " must be an array, not " + label(*v));
        }
        return v;
    }

    std::string optional_string(const char * key) const {
        const GgufValue * v = h_.find(key);
        if (!v) {
            return {};
        }
        if (v->type != GGUF_TYPE_STRING) {
            fail(std::string(key) + " must be a string, not " + label(*v));
        }
        return as_read(v->strings[0]);
    }

    // nullopt-like: -1 absent, else 0 or 1
    int optional_bool(const char * key) const {
        const GgufValue * v = h_.find(key);
        if (!v) {
            return -1;
        }
        if (v->type != GGUF_TYPE_BOOL) {
            fail(std::string(key) + " must be a bool, not " + label(*v));
        }
        return v->bytes[0] != 0;
    }

    int32_t id_of(const std::string & text) const {
        const auto it = ids_.find(text);
        return it == ids_.end() ? k_null : it->second;
    }

    void read_type(const GgufValue & model) {
        if (model.type != GGUF_TYPE_STRING) {
            fail(std::string("tokenizer.ggml.model must be a string, not ") + label(model));
        }
        const std::string & name = model.strings[0];
        static const std::unordered_map<std::string, VocabType> types = {
            {"llama", VocabType::spm}, {"gpt2", VocabType::bpe},  {"bert", VocabType::wpm},
            {"t5", VocabType::ugm},    {"rwkv", VocabType::rwkv},
        };
        const auto it = types.find(name);
        if (it == types.end()) {
            fail("tokenizer model '" + printable(name) +
                 "' is not supported (llama, gpt2, bert, t5 and rwkv vocabularies are)");
        }
        type_ = it->second;
        pre_ = optional_string("tokenizer.ggml.pre");
    }

    void read_tokens() {
        const GgufValue * tokens = array("tokenizer.ggml.tokens", true);
        if (tokens->elem_type != GGUF_TYPE_STRING) {
            fail(std::string("tokenizer.ggml.tokens must be an array of strings, not ") + label(*tokens));
        }
        if (tokens->n == 0 || tokens->n > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
            fail("tokenizer.ggml.tokens has " + std::to_string(tokens->n) + " tokens (1 to 2^31 - 1 allowed)");
        }
        texts_.reserve(tokens->strings.size());
        ids_.reserve(tokens->strings.size());
        for (size_t i = 0; i < tokens->strings.size(); ++i) {
            std::string text = as_read(tokens->strings[i]);
            if (text.empty()) {
                text = "[EMPTY_" + std::to_string(i) + "]";   // what llama.cpp names an empty token
            }
            // llama.cpp copies pieces with int32 lengths and aborts beyond them
            if (text.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
                fail("token " + std::to_string(i) + " is longer than 2^31 - 1 bytes");
            }
            const auto [it, inserted] = ids_.emplace(text, static_cast<int32_t>(i));
            if (!inserted) {
                fail("tokens " + std::to_string(it->second) + " and " + std::to_string(i) + " are both '" +
                     printable(text) + "' (as llama.cpp reads them: up to a NUL byte, empty ones renamed)");
            }
            texts_.push_back(std::move(text));
        }
    }

    void read_scores() {
        const GgufValue * scores = array("tokenizer.ggml.scores", false);
        if (!scores) {
            return;
        }
        if (scores->elem_type != GGUF_TYPE_FLOAT32 && scores->elem_type != GGUF_TYPE_INT32) {
            fail(std::string("tokenizer.ggml.scores must be float32 or int32, not ") + label(*scores));
        }
        if (scores->n != texts_.size()) {
            fail("tokenizer.ggml.scores has " + std::to_string(scores->n) + " entries for " +
                 std::to_string(texts_.size()) + " tokens");
        }
        if (scores->elem_type == GGUF_TYPE_FLOAT32) {
            // a NaN breaks the strict weak order of the tokenizers' priority queues
            for (uint64_t i = 0; i < scores->n; ++i) {
                float s;
                std::memcpy(&s, scores->bytes.data() + i * sizeof(float), sizeof(float));
                if (std::isnan(s)) {
                    fail("the score of token " + std::to_string(i) + " is NaN");
                }
            }
        }
    }

    void read_token_types() {
        const GgufValue * types = array("tokenizer.ggml.token_type", false);
        if (!types) {
            return;
        }
        if (types->elem_type != GGUF_TYPE_INT32) {
            fail(std::string("tokenizer.ggml.token_type must be int32, not ") + label(*types));
        }
        if (types->n != texts_.size()) {
            fail("tokenizer.ggml.token_type has " + std::to_string(types->n) + " entries for " +
                 std::to_string(texts_.size()) + " tokens");
        }
        for (uint64_t i = 0; i < types->n; ++i) {
            int32_t t;
            std::memcpy(&t, types->bytes.data() + i * sizeof(int32_t), sizeof(int32_t));
            if (t < 0 || t > k_token_type_max) {
                fail("token " + std::to_string(i) + " has type " + std::to_string(t) + " (0 to " +
                     std::to_string(k_token_type_max) + " exist)");
            }
            if (t == k_token_type_byte) {
                check_byte_token(static_cast<int32_t>(i));
            }
        }
    }

    // Byte tokens become one byte through their "<0xXX>" text; WPM has none.
    void check_byte_token(int32_t id) const {
        const std::string & text = texts_[id];
        if (type_ == VocabType::wpm) {
            fail("token " + std::to_string(id) + " is a byte token, which a bert (WPM) vocabulary cannot have");
        }
        const bool hex = text.size() == 6 && text.compare(0, 3, "<0x") == 0 && std::isxdigit(uint8_t(text[3])) &&
                         std::isxdigit(uint8_t(text[4])) && text[5] == '>';
        if (!hex && type_ != VocabType::rwkv) {
            fail("byte token " + std::to_string(id) + " is '" + printable(text) + "', not <0xXX>");
        }
    }

    void read_special_ids() {
        // llama.cpp's defaults per vocabulary type, dropped when outside the vocabulary
        switch (type_) {
            case VocabType::spm:
                bos_ = 1;
                eos_ = 2;
                unk_ = 0;
                break;
            case VocabType::wpm:
                bos_ = 101;
                unk_ = 100;
                sep_ = 102;
                break;
            case VocabType::bpe:
                bos_ = 11;
                eos_ = 11;
                break;
            case VocabType::ugm:
                eos_ = 1;
                unk_ = 2;
                break;
            case VocabType::rwkv: break;
        }
        for (int32_t * id : {&bos_, &eos_, &unk_, &sep_}) {
            if (*id >= n_tokens()) {
                *id = k_null;
            }
        }
        int32_t ignored = k_null;
        const SpecialKey keys[] = {
            {"tokenizer.ggml.bos_token_id", &bos_},        {"tokenizer.ggml.eos_token_id", &eos_},
            {"tokenizer.ggml.unknown_token_id", &unk_},    {"tokenizer.ggml.seperator_token_id", &sep_},
            {"tokenizer.ggml.eot_token_id", &ignored},     {"tokenizer.ggml.eom_token_id", &ignored},
            {"tokenizer.ggml.padding_token_id", &ignored}, {"tokenizer.ggml.mask_token_id", &ignored},
            {"tokenizer.ggml.fim_pre_token_id", &ignored}, {"tokenizer.ggml.fim_suf_token_id", &ignored},
            {"tokenizer.ggml.fim_mid_token_id", &ignored}, {"tokenizer.ggml.fim_pad_token_id", &ignored},
            {"tokenizer.ggml.fim_rep_token_id", &ignored}, {"tokenizer.ggml.fim_sep_token_id", &ignored},
            {"tokenizer.ggml.prefix_token_id", &ignored},  {"tokenizer.ggml.suffix_token_id", &ignored},
            {"tokenizer.ggml.middle_token_id", &ignored},
        };
        for (const SpecialKey & k : keys) {
            const GgufValue * v = h_.find(k.key);
            if (!v) {
                continue;
            }
            if (v->type != GGUF_TYPE_UINT32) {
                fail(std::string(k.key) + " must be a uint32, not " + label(*v));
            }
            uint32_t id;
            std::memcpy(&id, v->bytes.data(), sizeof(id));
            if (id >= static_cast<uint32_t>(n_tokens())) {
                fail(std::string(k.key) + " = " + std::to_string(id) + " is outside the vocabulary of " +
                     std::to_string(n_tokens()) + " tokens");
            }
            *k.id = static_cast<int32_t>(id);
        }
    }

    // llama.cpp asserts that the tokens tokenize adds exist, and writes the unknown
    // token's id into its output.
    void check_added_specials() const {
        const int add_bos_key = optional_bool("tokenizer.ggml.add_bos_token");
        const int add_eos_key = optional_bool("tokenizer.ggml.add_eos_token");
        optional_bool("tokenizer.ggml.add_sep_token");
        bool add_bos = false, add_eos = false;
        switch (type_) {
            case VocabType::spm:
                add_bos = add_bos_key != 0;
                add_eos = add_eos_key == 1;
                break;
            case VocabType::bpe:
                // Many pre-tokenizers turn BOS on by default and gemma4's always:
                // unless the file turns it off, BOS may be added.
                add_bos = add_bos_key != 0 || pre_ == "gemma4" || pre_ == "granite-embed-multi-311m";
                add_eos = add_eos_key == 1;
                break;
            case VocabType::wpm:
                add_bos = true;   // WPM adds BOS and SEP whatever the flags say
                break;
            case VocabType::ugm:
                add_bos = add_bos_key == 1;
                add_eos = add_eos_key != 0;
                break;
            case VocabType::rwkv: break;   // adds nothing
        }
        if (add_bos && bos_ == k_null) {
            fail(
                "tokenization adds a BOS token but the vocabulary has none (set tokenizer.ggml.bos_token_id, or "
                "tokenizer.ggml.add_bos_token = false)");
        }
        if (add_eos && eos_ == k_null) {
            fail(
                "tokenization adds an EOS token but the vocabulary has none (set tokenizer.ggml.eos_token_id, or "
                "tokenizer.ggml.add_eos_token = false)");
        }
        if (type_ == VocabType::wpm && sep_ == k_null) {
            fail("a bert (WPM) vocabulary needs a separator token (tokenizer.ggml.seperator_token_id)");
        }
        if ((type_ == VocabType::wpm || type_ == VocabType::ugm) && unk_ == k_null) {
            fail("this vocabulary type needs an unknown token (tokenizer.ggml.unknown_token_id)");
        }
    }

    // SPM spells a piece without a token as byte tokens: "<0xXX>", else the byte itself.
    void check_byte_fallback() const {
        static const char * hex = "0123456789ABCDEF";
        for (int b = 0; b < 256; ++b) {
            const char spelled[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
            if (id_of(spelled) == k_null && (b == 0 || id_of(std::string(1, static_cast<char>(b))) == k_null)) {
                fail(std::string("no token for byte ") + spelled +
                     ", which a llama (SPM) vocabulary needs for text outside its tokens");
            }
        }
    }

    void check_merges() const {
        const GgufValue * merges = array("tokenizer.ggml.merges", true);
        if (merges->elem_type != GGUF_TYPE_STRING) {
            fail(std::string("tokenizer.ggml.merges must be an array of strings, not ") + label(*merges));
        }
        if (merges->n > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
            fail("tokenizer.ggml.merges has more than 2^31 - 1 entries");
        }
        for (size_t i = 0; i < merges->strings.size(); ++i) {
            const std::string merge = as_read(merges->strings[i]);
            const size_t space = merge.find(' ', 1);
            if (space == std::string::npos) {
                fail("merge " + std::to_string(i) + " '" + printable(merge) + "' is not two tokens and a space");
            }
            const std::string first = merge.substr(0, space), second = merge.substr(space + 1);
            for (const std::string & part : {first, second, first + second}) {
                if (id_of(part) == k_null) {
                    fail("merge " + std::to_string(i) + " '" + printable(merge) + "' names '" + printable(part) +
                         "', which is not a token");
                }
            }
        }
    }

    // The normalizer's XOR-compressed double array: every walk from its root, by any
    // input byte, must stay inside the array, and every replacement it reaches must
    // be a NUL-terminated string inside the blob (llama.cpp throws out of
    // llama_tokenize otherwise).
    void check_charsmap() const {
        const GgufValue * map = array("tokenizer.ggml.precompiled_charsmap", false);
        if (!map) {
            return;
        }
        if (map->elem_type != GGUF_TYPE_UINT8 && map->elem_type != GGUF_TYPE_INT8) {
            fail(std::string("tokenizer.ggml.precompiled_charsmap must be bytes, not ") + label(*map));
        }
        const std::vector<uint8_t> & blob = map->bytes;
        if (blob.size() < sizeof(uint32_t)) {
            fail("tokenizer.ggml.precompiled_charsmap is shorter than its 4-byte header");
        }
        uint32_t xcda_bytes;
        std::memcpy(&xcda_bytes, blob.data(), sizeof(xcda_bytes));
        if (uint64_t(xcda_bytes) + sizeof(uint32_t) >= blob.size()) {
            fail("tokenizer.ggml.precompiled_charsmap declares " + std::to_string(xcda_bytes) +
                 " bytes of array in a blob of " + std::to_string(blob.size()));
        }
        const size_t n_nodes = xcda_bytes / sizeof(uint32_t);
        const uint8_t * replacements = blob.data() + sizeof(uint32_t) + xcda_bytes;
        const size_t n_replacements = blob.size() - sizeof(uint32_t) - xcda_bytes;
        if (n_nodes == 0) {
            return;   // llama.cpp then skips the array
        }
        auto node = [&](uint64_t index, const char * what) {
            if (index >= n_nodes) {
                fail(std::string("tokenizer.ggml.precompiled_charsmap: ") + what + " leads to node " +
                     std::to_string(index) + " of " + std::to_string(n_nodes));
            }
            uint32_t packed;
            std::memcpy(&packed, blob.data() + sizeof(uint32_t) + index * sizeof(uint32_t), sizeof(packed));
            return packed;
        };
        auto base = [](uint32_t p) { return (p >> 10) << ((p & (1U << 9)) >> 6); };
        std::vector<uint32_t> todo = {base(node(0, "the root"))};
        std::unordered_set<uint32_t> seen(todo.begin(), todo.end());
        while (!todo.empty()) {
            const uint32_t state = todo.back();
            todo.pop_back();
            for (uint32_t c = 1; c < 256; ++c) {
                const uint32_t index = state ^ c;
                const uint32_t p = node(index, "a byte");
                if ((p & ((1U << 31) | 0xff)) != c) {
                    continue;
                }
                const uint32_t next = index ^ base(p);
                if ((p >> 8) & 1) {
                    const uint32_t at = node(next, "a leaf") & ((1U << 31) - 1);
                    if (at >= n_replacements || !std::memchr(replacements + at, 0, n_replacements - at)) {
                        fail("tokenizer.ggml.precompiled_charsmap: a replacement at " + std::to_string(at) +
                             " is not a NUL-terminated string inside the blob");
                    }
                }
                if (seen.insert(next).second) {
                    todo.push_back(next);
                }
            }
        }
    }

    // RWKV tokens are escaped byte strings; every byte needs its own token so that
    // tokenization always advances.
    void check_rwkv_bytes() const {
        std::vector<bool> single(256, false);
        for (const std::string & text : texts_) {
            const std::string bytes = unescape_rwkv(text);
            if (bytes.size() == 1) {
                single[static_cast<uint8_t>(bytes[0])] = true;
            }
        }
        for (int b = 0; b < 256; ++b) {
            if (!single[b]) {
                fail("no single-byte token for byte " + std::to_string(b) + ", which an rwkv vocabulary needs");
            }
        }
    }

    // The token's bytes as llama.cpp decodes them: \t \n \r \xHH escapes, \ before
    // any other character stands for it.
    static std::string unescape_rwkv(const std::string & text) {
        std::string out;
        for (size_t i = 0; i < text.size(); ++i) {
            if (text[i] != '\\' || i + 1 == text.size()) {
                if (text[i] != '\\') {
                    out += text[i];
                }
                continue;
            }
            const char c = text[++i];
            if (c == 'x') {
                // two characters follow, read as hex digits (llama.cpp does not check them)
                uint8_t acc = 0;
                int taken = 0;
                for (; taken < 2 && i + 1 < text.size(); ++taken) {
                    const char d = text[++i];
                    acc = static_cast<uint8_t>((acc << 4) + ((d >= 'a') ? (d - 'a' + 10) : (d - '0')));
                }
                if (taken == 2) {
                    out += static_cast<char>(acc);
                }
            } else {
                out += c == 't' ? '\t' : c == 'n' ? '\n' : c == 'r' ? '\r' : c;
            }
        }
        return out;
    }

    const GgufHeader & h_;
    const std::string & path_;
    VocabType type_ = VocabType::spm;
    std::string pre_;
    std::vector<std::string> texts_;
    std::unordered_map<std::string, int32_t> ids_;
    int32_t bos_ = k_null, eos_ = k_null, unk_ = k_null, sep_ = k_null;
};

// Files whose vocabulary passed, by identity: a model's engine and its tokenizer
// check the same file one after the other, and a large vocabulary takes a few
// hundred milliseconds to read.
class PassedFiles {
public:
    bool contains(const std::string & path, const struct stat & st) {
        std::lock_guard<std::mutex> lock(mutex_);
        return std::any_of(passed_.begin(), passed_.end(), [&](const Passed & p) { return p.same(path, st); });
    }

    void add(const std::string & path, const struct stat & st) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (passed_.size() == k_kept) {
            passed_.erase(passed_.begin());
        }
        passed_.push_back({path, st.st_dev, st.st_ino, st.st_size, st.st_mtim});
    }

private:
    struct Passed {
        std::string path;
        dev_t device;
        ino_t inode;
        off_t size;
        timespec mtime;

        bool same(const std::string & p, const struct stat & st) const {
            return p == path && st.st_dev == device && st.st_ino == inode && st.st_size == size &&
                   st.st_mtim.tv_sec == mtime.tv_sec && st.st_mtim.tv_nsec == mtime.tv_nsec;
        }
    };

    static constexpr size_t k_kept = 16;
    std::mutex mutex_;
    std::vector<Passed> passed_;
};

PassedFiles passed_files;

}  // namespace

void check_vocabulary_file(const std::string & path, int64_t n_vocab, bool require) {
    struct stat st{};
    const bool identified = stat(path.c_str(), &st) == 0;
    // a pass without n_vocab says nothing of the model's rows: only such checks reuse it
    if (identified && n_vocab < 0 && passed_files.contains(path, st)) {
        return;
    }
    // every array is kept: outside the vocabulary, metadata arrays are small
    const GgufHeader header = read_gguf_header(path, std::numeric_limits<uint64_t>::max());
    if (VocabChecker(header, path).check(n_vocab, require) && identified) {
        passed_files.add(path, st);
    }
}

}  // namespace river
