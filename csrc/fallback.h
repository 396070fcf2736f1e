// Ops that a device's backend cannot run and that ggml's scheduler therefore runs on
// the CPU: the scheduler does this silently (ggml_backend_sched assigns each node to
// the first backend that supports it), so a placement could look offloaded while part
// of each layer computes on the host. Found per scheduled graph, reported by name.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ggml-backend.h"

namespace river {

// (device name, op name) pairs of `gf`'s nodes that the scheduler put on the CPU
// (backends.back()) although an input of theirs lives or is computed on a device in
// `backends` whose backend does not support them. Call after ggml_backend_sched_alloc_graph.
std::set<std::pair<std::string, std::string>> find_fallbacks(ggml_backend_sched_t sched, ggml_cgraph * gf,
                                                             const std::vector<ggml_backend_t> & backends);

}  // namespace river
