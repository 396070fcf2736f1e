// The vocabulary of a GGUF (tokenizer.* metadata) checked against every invariant
// that llama.cpp's vocabulary loader or its tokenizers assert, abort on or throw
// through its C API for, so that a hostile file is a RiverError and never a dead
// process. Owns no state; does not tokenize (llama.cpp does, river_cpp/tokenizer.py).
#pragma once

#include <cstdint>
#include <string>

namespace river {

// Reads the header of `path` with its vocabulary arrays (the engine's own header
// skips long arrays) and throws river::Error naming `path` and the first broken
// invariant. n_vocab >= 0: the rows of the model's embedding and head, which every
// token id the model produces must index. require: a file without
// tokenizer.ggml.model is an error (false: it passes, for engines that never
// tokenize).
void check_vocabulary_file(const std::string & path, int64_t n_vocab, bool require);

}  // namespace river
