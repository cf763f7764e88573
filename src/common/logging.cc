#include "common/logging.h"

#include <atomic>
#include <cstdio>

namespace tessera {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarning)};
std::atomic<int> g_rank{-1};
const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "?";
}
}  // namespace

LogLevel parse_log_level(const std::string& word) {
  if (word == "debug") return LogLevel::kDebug;
  if (word == "info") return LogLevel::kInfo;
  if (word == "error") return LogLevel::kError;
  TESSERA_CHECK(word == "warning", "unknown log level '", word, "'; accepted: ", kLogLevel.choices);
  return LogLevel::kWarning;
}

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }
void set_log_rank(int rank) { g_rank = rank; }

void log(LogLevel level, const std::string& message) {
  // One fprintf per line so that lines from threads do not interleave mid-line.
  const int rank = g_rank.load();
  if (rank >= 0) {
    std::fprintf(stderr, "[rank %d] tessera %s: %s\n", rank, level_name(level), message.c_str());
  } else {
    std::fprintf(stderr, "tessera %s: %s\n", level_name(level), message.c_str());
  }
}

}  // namespace tessera
