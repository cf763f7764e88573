// The negotiation wire format: a list of TensorSpecs as bytes, so that ranks can gather each
// other's pending requests. Little-endian, length-prefixed, versioned. decode_specs() checks
// every length against what is left and throws InvalidArgument naming the byte offset, so a
// corrupt or hostile message never reads out of bounds (a fuzz target later).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor_spec.h"

namespace tessera {
namespace engine {

std::string encode_specs(const std::vector<TensorSpec>& specs);
std::vector<TensorSpec> decode_specs(const char* data, size_t size);

}  // namespace engine
}  // namespace tessera
