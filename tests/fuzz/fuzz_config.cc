// libFuzzer target: the config files `tessera tune` writes and `--config` reads
// (tune/config_file.h). Any text must give knob values or InvalidArgument naming the file.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "tune/config_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)tessera::tune::parse_config(std::string(reinterpret_cast<const char*>(data), size),
                                      "fuzz.json");
  } catch (const tessera::InvalidArgument&) {
  }
  return 0;
}
