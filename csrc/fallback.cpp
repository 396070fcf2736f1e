#include "fallback.h"

namespace river {

namespace {

// The device backend a tensor lives on or is computed on (nullptr: the CPU).
ggml_backend_t device_of(ggml_backend_sched_t sched, ggml_tensor * t, const std::vector<ggml_backend_t> & devices) {
    const ggml_tensor * owner = t->view_src ? t->view_src : t;
    if (owner->buffer) {
        ggml_backend_dev_t dev = ggml_backend_buft_get_device(ggml_backend_buffer_get_type(owner->buffer));
        for (ggml_backend_t backend : devices) {
            if (ggml_backend_get_device(backend) == dev) {
                return backend;
            }
        }
    }
    ggml_backend_t assigned = ggml_backend_sched_get_tensor_backend(sched, t);
    for (ggml_backend_t backend : devices) {
        if (assigned == backend) {
            return backend;
        }
    }
    return nullptr;
}

}  // namespace

std::set<std::pair<std::string, std::string>> find_fallbacks(ggml_backend_sched_t sched, ggml_cgraph * gf,
                                                             const std::vector<ggml_backend_t> & backends) {
    std::set<std::pair<std::string, std::string>> found;
    if (backends.size() < 2) {
        return found;
    }
    const std::vector<ggml_backend_t> devices(backends.begin(), backends.end() - 1);
    ggml_backend_t cpu = backends.back();
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        ggml_tensor * node = ggml_graph_node(gf, i);
        if (ggml_backend_sched_get_tensor_backend(sched, node) != cpu) {
            continue;
        }
        for (int s = 0; s < GGML_MAX_SRC && node->src[s]; ++s) {
            ggml_backend_t wanted = device_of(sched, node->src[s], devices);
            if (wanted && !ggml_backend_supports_op(wanted, node)) {
                found.insert({ggml_backend_dev_name(ggml_backend_get_device(wanted)), ggml_op_desc(node)});
            }
        }
    }
    return found;
}

}  // namespace river
