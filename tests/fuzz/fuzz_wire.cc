// libFuzzer target: the negotiation wire format (engine/wire.h). Any bytes must decode to specs
// or fail with InvalidArgument, never read out of bounds; what decodes re-encodes to the same
// specs.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "common/error.h"
#include "engine/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::engine;
  std::vector<TensorSpec> specs;
  try {
    specs = decode_specs(reinterpret_cast<const char*>(data), size);
  } catch (const tessera::InvalidArgument&) {
    return 0;  // refused with a message: what must happen to bad bytes
  }
  for (const TensorSpec& s : specs) {
    try {
      (void)s.bytes();  // the engine sizes buffers from it: overflow must be refused, not wrap
    } catch (const tessera::InvalidArgument&) {
    }
  }
  const std::string again = encode_specs(specs);
  const std::vector<TensorSpec> back = decode_specs(again.data(), again.size());
  if (back.size() != specs.size()) std::abort();
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!spec_difference(specs[i], back[i]).empty() || specs[i].name != back[i].name) {
      std::abort();
    }
  }
  return 0;
}
