#include "offload.h"

#include <algorithm>

#include "common.h"
#include "ggml-alloc.h"

namespace river {

bool device_multiplies(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft, const ggml_tensor * w) {
    ggml_init_params params{ggml_tensor_overhead() * 4, nullptr, true};
    ggml_context * ctx = ggml_init(params);
    ggml_tensor * weight = ggml_new_tensor(ctx, w->type, ggml_n_dims(w), w->ne);
    ggml_tensor * input = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, w->ne[0], 1);
    ggml_tensor * op = ggml_mul_mat(ctx, weight, input);
    ggml_backend_buffer_t probe = ggml_backend_buft_alloc_buffer(buft, 0);
    weight->buffer = probe;
    const bool ok = probe && ggml_backend_dev_supports_op(dev, op);
    weight->buffer = nullptr;
    if (probe) {
        ggml_backend_buffer_free(probe);
    }
    ggml_free(ctx);
    return ok;
}

ggml_backend_dev_t placement_device(const std::string & name) {
    return name == k_host_device ? nullptr : device_by_name(name);
}

DeviceWeights::~DeviceWeights() {
    buffers_.clear();
    for (auto & [dev, ctx] : contexts_) {
        ggml_free(ctx);
    }
}

ggml_tensor * DeviceWeights::on(ggml_backend_dev_t dev, ggml_tensor * host) {
    if (!dev || !host) {
        return host;
    }
    auto found = index_.find({dev, host});
    if (found != index_.end()) {
        return found->second;
    }
    ggml_tensor * result = host;
    const bool matrix = ggml_n_dims(host) == 2;
    if (!matrix || device_multiplies(dev, ggml_backend_dev_buffer_type(dev), host)) {
        ggml_context *& ctx = contexts_[dev];
        if (!ctx) {
            ggml_init_params params{ggml_tensor_overhead() * max_tensors_, nullptr, true};
            ctx = ggml_init(params);
        }
        result = ggml_dup_tensor(ctx, host);
        ggml_set_name(result, host->name);
        copies_[dev].push_back({host, result});
    } else {
        log(LogLevel::warn, std::string(ggml_backend_dev_name(dev)) + " cannot multiply with " + host->name + " (" +
                                ggml_type_name(host->type) + "): it stays on the host");
    }
    index_[{dev, host}] = result;
    return result;
}

void DeviceWeights::upload() {
    for (auto & [dev, copies] : copies_) {
        const std::string name = ggml_backend_dev_name(dev);
        ggml_backend_dev_props props;
        ggml_backend_dev_get_props(dev, &props);
        size_t placed = 0;
        if (props.caps.buffer_from_host_ptr) {
            // one wrap per mapped file: the tensors keep their bytes where they are
            std::map<ggml_backend_buffer_t, std::vector<Copy *>> by_file;
            for (Copy & c : copies) {
                by_file[c.host->buffer].push_back(&c);
            }
            for (auto & [file_buffer, file_copies] : by_file) {
                size_t max_tensor = 0;
                for (Copy * c : file_copies) {
                    max_tensor = std::max(max_tensor, ggml_nbytes(c->host));
                }
                BufferPtr wrap(ggml_backend_dev_buffer_from_host_ptr(dev, ggml_backend_buffer_get_base(file_buffer),
                                                                     ggml_backend_buffer_get_size(file_buffer),
                                                                     max_tensor));
                if (!wrap) {
                    throw Error("cannot map the model file into " + name + "'s memory");
                }
                ggml_backend_buffer_set_usage(wrap.get(), GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
                for (Copy * c : file_copies) {
                    if (ggml_backend_tensor_alloc(wrap.get(), c->copy, c->host->data) != GGML_STATUS_SUCCESS) {
                        throw Error(std::string("cannot place tensor '") + c->host->name + "' on " + name);
                    }
                    placed += ggml_nbytes(c->host);
                }
                buffers_.push_back(std::move(wrap));
            }
        } else {
            ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(dev);
            BufferPtr buffer(ggml_backend_alloc_ctx_tensors_from_buft(contexts_[dev], buft));
            if (!buffer) {
                throw Error("cannot allocate the weights placed on " + name + " in " + ggml_backend_buft_name(buft) +
                            ": lower n_gpu_layers");
            }
            ggml_backend_buffer_set_usage(buffer.get(), GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
            log(LogLevel::info, "uploading " + std::to_string(ggml_backend_buffer_get_size(buffer.get()) >> 20) +
                                    " MiB of weights to " + name);
            size_t next_report = 0;
            for (size_t i = 0; i < copies.size(); ++i) {
                ggml_backend_tensor_set(copies[i].copy, copies[i].host->data, 0, ggml_nbytes(copies[i].host));
                placed += ggml_nbytes(copies[i].host);
                if (i + 1 >= next_report) {
                    log(LogLevel::debug, name + ": " + std::to_string(i + 1) + "/" + std::to_string(copies.size()) +
                                             " tensors uploaded");
                    next_report += std::max<size_t>(1, copies.size() / 10);
                }
            }
            buffers_.push_back(std::move(buffer));
        }
        bytes_[name] += placed;
    }
}

std::map<std::string, size_t> DeviceWeights::bytes_by_device() const {
    return bytes_;
}

void DeviceWeights::forsake_if_lost(const std::set<ggml_backend_dev_t> & lost) {
    for (BufferPtr & buffer : buffers_) {
        river::forsake_if_lost(buffer, lost);
    }
}

void place_layers(DeviceWeights & copies, std::vector<LayerWeights> & layers, const std::vector<std::string> & names) {
    for (size_t il = 0; il < layers.size(); ++il) {
        ggml_backend_dev_t dev = placement_device(names[il]);
        for (ggml_tensor ** t : tensor_slots(layers[il])) {
            *t = copies.on(dev, *t);
        }
    }
}

}  // namespace river
