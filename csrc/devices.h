// The compute devices ggml offers this process: whatever llama-cpp-python's ggml
// was built with (CUDA, Metal, Vulkan, ...), RPC servers added at run time, and the
// CPU. Knows nothing of models; the engine asks it for devices by name.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ggml-backend.h"

namespace river {

// The name the engine and placement use for the CPU (the host).
inline const char * const k_host_device = "CPU";

struct DeviceInfo {
    std::string name;          // ggml's device name, e.g. "CUDA0", "RPC0[127.0.0.1:50052]", "CPU"
    std::string description;
    std::string type;          // "cpu", "gpu", "igpu" or "accel"
    size_t memory_free = 0;
    size_t memory_total = 0;
    bool host_ptr_buffers = false;   // can wrap host memory (a mapped file) without a copy
};

// Loads dynamically built backends once (a no-op where they are linked in).
void load_backends();

// Every device, offloading devices first in ggml's order, the CPU last; of the RPC
// devices only those of `rpc_endpoints` (asking a server that went away for its
// memory would abort the process).
std::vector<DeviceInfo> list_devices(const std::vector<std::string> & rpc_endpoints = {});

// The names of the registered backends (ggml's registry: "CPU", "Vulkan", "RPC", ...).
std::vector<std::string> backend_names();

// What the CPU backend reports about itself: features it detected or was built for
// ("AVX2" -> "1", "AMX_INT8" -> "1", ...), in its order.
std::vector<std::pair<std::string, std::string>> cpu_features();

// The device called `name`; throws naming the devices there are.
ggml_backend_dev_t device_by_name(const std::string & name);

// Whether the installed ggml has the RPC backend (-DGGML_RPC=on).
bool has_rpc();

// Adds the devices of the RPC server at "host:port" (once per endpoint). Throws when
// ggml has no RPC backend. The caller checks that the server answers: ggml's RPC
// client aborts the process on a failed connection.
void add_rpc_server(const std::string & endpoint);

// Serves this machine's CPU to RPC clients at "host:port" until the process ends.
void serve_rpc(const std::string & endpoint, int n_threads);

}  // namespace river
