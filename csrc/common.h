// Shared error type and logging hook of the river engine.
// Owns nothing but the exception class and the log sink; the Python side installs
// the sink (bindings.cpp) so that csrc/ never prints.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

namespace river {

// Every failure the engine can detect is raised as this type, with the file,
// tensor or key it concerns in the message; bindings translate it to RiverError.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

enum class LogLevel { debug, info, warn };

using LogSink = std::function<void(LogLevel, const std::string &)>;

void set_log_sink(LogSink sink);
void log(LogLevel level, const std::string & message);

}  // namespace river
