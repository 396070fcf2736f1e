// Placement of weights and cache on devices: where each layer of each weight set
// computes, and the device copies of mapped weights that this needs. Decides
// nothing itself: river_cpp/placement.py plans, the engine applies the plan here.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "devices.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "weights.h"

namespace river {

// Device names as list_devices() gives them; k_host_device for the host, where the
// weights stay in the mapped file (repacked where the CPU has a faster layout).
struct Placement {
    std::vector<std::string> backbone_layers;
    std::vector<std::string> river_layers;   // empty without a river
    std::string backbone_head = k_host_device;   // output norm and LM head
    std::string river_head = k_host_device;
    std::string kv_cache = k_host_device;
};

// Whether `dev` multiplies with a matrix like `w` held in a buffer of type `buft`:
// the device answers for the op, so it is shown one with a weight in such a buffer.
bool device_multiplies(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft, const ggml_tensor * w);

// Device copies of host-mapped weights, collected first so that each device gets
// one buffer, then filled by upload().
class DeviceWeights {
public:
    explicit DeviceWeights(size_t max_tensors) : max_tensors_(max_tensors) {}
    ~DeviceWeights();
    DeviceWeights(const DeviceWeights &) = delete;
    DeviceWeights & operator=(const DeviceWeights &) = delete;

    // The tensor to compute with on `dev` (nullptr: the host) in place of the mapped
    // `host`: `host` itself on the host or where the device cannot multiply with it,
    // else a copy, one per device however often asked.
    ggml_tensor * on(ggml_backend_dev_t dev, ggml_tensor * host);
    // Allocates and fills the copies. A device that can wrap host memory maps the
    // file's pages without a copy (Metal, and the CPU-like devices); others receive
    // an upload, logged per device.
    void upload();
    // Bytes placed on each device.
    std::map<std::string, size_t> bytes_by_device() const;
    // The destructor will leak the copies on `lost` devices (see forsake_if_lost).
    void forsake_if_lost(const std::set<ggml_backend_dev_t> & lost);

private:
    struct Copy {
        ggml_tensor * host;
        ggml_tensor * copy;
    };
    size_t max_tensors_;
    std::map<ggml_backend_dev_t, ggml_context *> contexts_;
    std::map<ggml_backend_dev_t, std::vector<Copy>> copies_;
    std::map<std::pair<ggml_backend_dev_t, ggml_tensor *>, ggml_tensor *> index_;
    std::vector<BufferPtr> buffers_;
    std::map<std::string, size_t> bytes_;
};

// Replaces every tensor of layers[il] by its copy on the device named names[il].
void place_layers(DeviceWeights & copies, std::vector<LayerWeights> & layers, const std::vector<std::string> & names);
// The device of a placement name; nullptr for the host.
ggml_backend_dev_t placement_device(const std::string & name);

}  // namespace river
