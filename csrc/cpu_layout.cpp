#include "cpu_layout.h"

#include <algorithm>
#include <map>

#include "common.h"
#include "ggml-alloc.h"
#include "offload.h"

namespace river {

std::vector<ggml_backend_buffer_type_t> cpu_extra_buffer_types() {
    std::vector<ggml_backend_buffer_type_t> types;
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!cpu) {
        return types;
    }
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(cpu);
    auto get_extra = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts"));
    for (ggml_backend_buffer_type_t * t = get_extra ? get_extra(cpu) : nullptr; t && *t; ++t) {
        types.push_back(*t);
    }
    return types;
}

ggml_backend_buffer_type_t cpu_extra_buffer_type(const std::string & name) {
    std::string known;
    for (ggml_backend_buffer_type_t buft : cpu_extra_buffer_types()) {
        if (name == ggml_backend_buft_name(buft)) {
            return buft;
        }
        known += (known.empty() ? "" : ", ") + std::string(ggml_backend_buft_name(buft));
    }
    throw Error("no CPU extra buffer type '" + name + "' (this ggml has: " + (known.empty() ? "none" : known) + ")");
}

RepackedTensors::~RepackedTensors() {
    buffers_.clear();
    if (ctx_) {
        ggml_free(ctx_);
    }
}

void RepackedTensors::repack(const std::vector<ggml_tensor **> & tensors,
                             const std::vector<ggml_backend_buffer_t> & host_buffers,
                             const std::vector<std::string> & allowed) {
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    std::vector<ggml_backend_buffer_type_t> extra;
    for (const std::string & name : allowed) {
        extra.push_back(cpu_extra_buffer_type(name));
    }
    // ggml's order of preference, whatever the order of `allowed`
    const std::vector<ggml_backend_buffer_type_t> all = cpu_extra_buffer_types();
    std::sort(extra.begin(), extra.end(), [&](ggml_backend_buffer_type_t a, ggml_backend_buffer_type_t b) {
        return std::find(all.begin(), all.end(), a) < std::find(all.begin(), all.end(), b);
    });
    if (extra.empty()) {
        return;
    }
    ggml_init_params params{ggml_tensor_overhead() * tensors.size(), nullptr, true};
    ctx_ = ggml_init(params);

    std::map<ggml_backend_buffer_type_t, std::vector<std::pair<ggml_tensor **, ggml_tensor *>>> placed;
    for (ggml_tensor ** slot : tensors) {
        // mapped weights only: a tensor placed on another device is that device's business
        if (std::find(host_buffers.begin(), host_buffers.end(), (*slot)->buffer) == host_buffers.end()) {
            continue;
        }
        for (ggml_backend_buffer_type_t buft : extra) {
            if (device_multiplies(cpu, buft, *slot)) {
                ggml_tensor * copy = ggml_dup_tensor(ctx_, *slot);
                ggml_set_name(copy, (*slot)->name);
                placed[buft].push_back({slot, copy});
                break;
            }
        }
    }
    for (auto & [buft, pairs] : placed) {
        size_t size = 0;
        for (auto & [slot, copy] : pairs) {
            size += GGML_PAD(ggml_backend_buft_get_alloc_size(buft, copy), ggml_backend_buft_get_alignment(buft));
        }
        BufferPtr buffer(ggml_backend_buft_alloc_buffer(buft, size));
        if (!buffer) {
            throw Error(std::string("cannot allocate ") + std::to_string(size) + " bytes of " +
                        ggml_backend_buft_name(buft));
        }
        ggml_backend_buffer_set_usage(buffer.get(), GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        ggml_tallocr alloc = ggml_tallocr_new(buffer.get());
        for (auto & [slot, copy] : pairs) {
            if (ggml_tallocr_alloc(&alloc, copy) != GGML_STATUS_SUCCESS) {
                throw Error(std::string("cannot place tensor '") + copy->name + "' in " + ggml_backend_buft_name(buft));
            }
            // the buffer type's set_tensor converts rows into its interleaved layout
            ggml_backend_tensor_set(copy, (*slot)->data, 0, ggml_nbytes(*slot));
            *slot = copy;
            ++count_;
            ++counts_[ggml_backend_buft_name(buft)];
        }
        buffers_.push_back(std::move(buffer));
    }
}

}  // namespace river
