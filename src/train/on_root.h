// Work that one rank does for all (reading a file, opening every slide): rank 0 runs it and its
// failure becomes every rank's failure with the same message, so a bad file seen by rank 0 never
// leaves the other ranks waiting.
#pragma once

#include <functional>
#include <string>

namespace tessera {
namespace train {

// Runs `work` on rank 0 (every rank when !dist) and broadcasts its result bytes under `name`;
// an Error thrown by `work` is rethrown on every rank as InvalidArgument with its message.
std::string on_root(bool dist, const std::string& name, const std::function<std::string()>& work);

}  // namespace train
}  // namespace tessera
