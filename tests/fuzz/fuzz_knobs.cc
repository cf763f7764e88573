// libFuzzer target: the settings mechanism (common/settings.h) over every torch-free layer's
// declarations, and the grammars behind settings: byte sizes, TESSERA_ALLREDUCE's size ranges
// (comm/selector.h) and the autotuner's bounds (tune/search_space.h). The input is lines
// NAME=VALUE; bad values must fail with InvalidArgument (a message naming the setting), never
// crash or be accepted out of range.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "comm/selector.h"
#include "comm/settings.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/settings.h"
#include "engine/options.h"
#include "runtime/liveness.h"
#include "tune/autotuner.h"
#include "tune/search_space.h"
#include "tune/settings.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tessera::SettingValues env;
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    const size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
    at = end + 1;
  }
  std::vector<tessera::SettingInfo> known = {tessera::kLogLevel.info(),
                                             tessera::runtime::kHeartbeatTimeout.info()};
  for (const auto& layer :
       {tessera::comm::declared_settings(), tessera::engine::declared_settings(),
        tessera::tune::declared_settings()}) {
    known.insert(known.end(), layer.begin(), layer.end());
  }
  tessera::SettingSources sources;
  sources.explicit_values = env;
  sources.environment = env;
  (void)tessera::resolve_settings(sources, known);  // reports, never throws
  try {
    (void)tessera::comm::settings_from(env);
    (void)tessera::engine::options_from(env);
    (void)tessera::tune::TunerOptions::from(env);
  } catch (const tessera::InvalidArgument&) {
  }
  try {
    (void)tessera::parse_bytes(text);
  } catch (const tessera::InvalidArgument&) {
  }
  try {
    (void)tessera::comm::parse_override(text);
  } catch (const tessera::InvalidArgument&) {
  }
  try {
    (void)tessera::tune::parse_bounds(text);
  } catch (const tessera::InvalidArgument&) {
  }
  return 0;
}
