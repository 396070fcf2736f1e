// Building a river: the backbone's block matrices re-quantized to low-bit types,
// written as a GGUF that holds only those matrices (and a low-bit LM head).
// Does not decide where the file lives or when it is stale (Python's river.py).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ggml.h"
#include "hparams.h"

namespace river {

class GgufFile;

struct RiverSpec {
    std::vector<ggml_type> layer_types;   // requested type of each layer's matrices
    ggml_type head_type = GGML_TYPE_Q4_0; // the optional low-bit LM head
    std::map<std::string, std::string> metadata;  // extra string keys (backbone identity)
};

using ProgressFn = std::function<void(int64_t done, int64_t total)>;

// "q4_0" -> GGML_TYPE_Q4_0. Throws for unknown names and for types that cannot be
// made without an importance matrix.
ggml_type river_type_from_name(const std::string & name);

// The type a matrix with rows of n_per_row elements actually gets: `wanted` when
// its block divides the row, else the nearest type whose block does (as llama.cpp's
// quantizer falls back, e.g. Q4_K -> Q5_0 for rows of 576).
ggml_type river_type_for_row(ggml_type wanted, int64_t n_per_row);

// Quantizes every block matrix of `backbone` and writes the river GGUF to
// out_path (through a temporary file and a rename), using n_threads threads.
void build_river(const GgufFile & backbone, const HParams & hp, const RiverSpec & spec, const std::string & out_path,
                 int n_threads, const ProgressFn & progress);

}  // namespace river
