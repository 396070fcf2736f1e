#include "common.h"

#include <mutex>

namespace river {

namespace {
std::mutex g_log_mutex;
LogSink g_log_sink;
}  // namespace

void set_log_sink(LogSink sink) {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    g_log_sink = std::move(sink);
}

void log(LogLevel level, const std::string & message) {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    if (g_log_sink) {
        g_log_sink(level, message);
    }
}

}  // namespace river
