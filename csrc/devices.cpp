#include "devices.h"

#include <algorithm>
#include <mutex>
#include <set>

#include "common.h"

namespace river {

namespace {

const char * type_name(enum ggml_backend_dev_type type) {
    switch (type) {
        case GGML_BACKEND_DEVICE_TYPE_CPU: return "cpu";
        case GGML_BACKEND_DEVICE_TYPE_GPU: return "gpu";
        case GGML_BACKEND_DEVICE_TYPE_IGPU: return "igpu";
        default: return "accel";
    }
}

ggml_backend_reg_t rpc_reg() {
    load_backends();
    ggml_backend_reg_t reg = ggml_backend_reg_by_name("RPC");
    if (!reg) {
        throw Error(
            "this ggml has no RPC backend: reinstall llama-cpp-python built with it, "
            "CMAKE_ARGS=\"-DGGML_RPC=on\" pip install --no-cache-dir --force-reinstall llama-cpp-python "
            "(or install with scripts/install_with_devices.sh)");
    }
    return reg;
}

template <typename Fn>
Fn rpc_function(const char * name) {
    auto fn = reinterpret_cast<Fn>(ggml_backend_reg_get_proc_address(rpc_reg(), name));
    if (!fn) {
        throw Error(std::string("this ggml's RPC backend lacks ") + name);
    }
    return fn;
}

}  // namespace

void load_backends() {
    static std::once_flag once;
    std::call_once(once, [] { ggml_backend_load_all(); });
}

std::vector<DeviceInfo> list_devices(const std::vector<std::string> & rpc_endpoints) {
    load_backends();
    ggml_backend_reg_t rpc = ggml_backend_reg_by_name("RPC");
    std::vector<DeviceInfo> devices;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        const std::string description = ggml_backend_dev_description(dev);
        const bool is_rpc = rpc && std::string(ggml_backend_dev_name(dev)).rfind("RPC", 0) == 0;
        if (is_rpc && std::find(rpc_endpoints.begin(), rpc_endpoints.end(), description) == rpc_endpoints.end()) {
            continue;
        }
        ggml_backend_dev_props props;
        ggml_backend_dev_get_props(dev, &props);
        DeviceInfo info;
        info.name = props.name;
        info.description = props.description ? props.description : "";
        info.type = type_name(props.type);
        info.memory_free = props.memory_free;
        info.memory_total = props.memory_total;
        info.host_ptr_buffers = props.caps.buffer_from_host_ptr;
        devices.push_back(info);
    }
    // the CPU last, as the scheduler wants its backends
    std::stable_partition(devices.begin(), devices.end(), [](const DeviceInfo & d) { return d.type != "cpu"; });
    return devices;
}

std::vector<std::string> backend_names() {
    load_backends();
    std::vector<std::string> names;
    for (size_t i = 0; i < ggml_backend_reg_count(); ++i) {
        names.emplace_back(ggml_backend_reg_name(ggml_backend_reg_get(i)));
    }
    return names;
}

std::vector<std::pair<std::string, std::string>> cpu_features() {
    load_backends();
    std::vector<std::pair<std::string, std::string>> features;
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!cpu) {
        return features;
    }
    auto get_features = reinterpret_cast<ggml_backend_get_features_t>(
        ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(cpu), "ggml_backend_get_features"));
    for (ggml_backend_feature * f = get_features ? get_features(ggml_backend_dev_backend_reg(cpu)) : nullptr;
         f && f->name; ++f) {
        features.emplace_back(f->name, f->value);
    }
    return features;
}

ggml_backend_dev_t device_by_name(const std::string & name) {
    load_backends();
    if (ggml_backend_dev_t dev = ggml_backend_dev_by_name(name.c_str())) {
        return dev;
    }
    std::string known;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        known += (known.empty() ? "" : ", ") + std::string(ggml_backend_dev_name(ggml_backend_dev_get(i)));
    }
    throw Error("no device named '" + name + "' (devices: " + known + ")");
}

bool has_rpc() {
    load_backends();
    return ggml_backend_reg_by_name("RPC") != nullptr;
}

void add_rpc_server(const std::string & endpoint) {
    static std::mutex mutex;
    static std::set<std::string> added;
    using add_server_t = ggml_backend_reg_t (*)(const char *);
    auto add_server = rpc_function<add_server_t>("ggml_backend_rpc_add_server");
    std::lock_guard<std::mutex> lock(mutex);
    if (added.count(endpoint)) {
        return;
    }
    ggml_backend_reg_t reg = add_server(endpoint.c_str());
    if (!reg || ggml_backend_reg_dev_count(reg) == 0) {
        throw Error("the RPC server at " + endpoint + " offers no device");
    }
    ggml_backend_register(reg);
    added.insert(endpoint);
}

void serve_rpc(const std::string & endpoint, int n_threads) {
    using start_server_t = void (*)(const char *, const char *, size_t, size_t, ggml_backend_dev_t *);
    auto start_server = rpc_function<start_server_t>("ggml_backend_rpc_start_server");
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!cpu) {
        throw Error("ggml has no CPU device to serve");
    }
    if (n_threads <= 0) {
        throw Error("n_threads must be positive, got " + std::to_string(n_threads));
    }
    start_server(endpoint.c_str(), nullptr, static_cast<size_t>(n_threads), 1, &cpu);
}

}  // namespace river
