// Minimal leveled logging to stderr, prefixed with the rank once it is known.
#pragma once

#include <string>

#include "common/error.h"
#include "common/settings.h"

namespace tessera {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

inline constexpr ChoiceSetting kLogLevel{"TESSERA_LOG_LEVEL", "warning", "debug,info,warning,error",
                                         "log lines below this level are dropped"};
// kLogLevel's word as a level.
LogLevel parse_log_level(const std::string& word);

// Messages below this level are dropped. Set once from TESSERA_LOG_LEVEL at init.
void set_log_level(LogLevel level);
LogLevel log_level();
// The rank shown in front of every line ("[rank 3] ..."); -1 before MPI is initialised.
void set_log_rank(int rank);

void log(LogLevel level, const std::string& message);

}  // namespace tessera

#define TESSERA_LOG(level, ...)                                                           \
  do {                                                                                    \
    if (::tessera::LogLevel::level >= ::tessera::log_level()) {                           \
      ::tessera::log(::tessera::LogLevel::level, ::tessera::detail::concat(__VA_ARGS__)); \
    }                                                                                     \
  } while (0)
