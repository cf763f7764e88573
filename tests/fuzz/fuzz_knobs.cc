// libFuzzer target: the knob registry's parser (common/knobs.h) and the grammars behind knobs:
// byte sizes, TESSERA_ALLREDUCE's size ranges (comm/selector.h) and the autotuner's bounds
// (tune/search_space.h). The input is lines NAME=VALUE; bad values must fail with
// InvalidArgument (a message naming the knob), never crash or be accepted out of range.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "comm/selector.h"
#include "common/error.h"
#include "common/knobs.h"
#include "tune/search_space.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> env;
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    const size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
    at = end + 1;
  }
  try {
    const tessera::Knobs k = tessera::parse_knobs([&](const char* name) -> const char* {
      const auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
    (void)k;
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
