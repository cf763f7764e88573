// Files that are never seen half-written: the bytes go to a temporary file beside the target,
// which is flushed to disk (fsync) and renamed over it; a crash at any moment leaves either the
// old file or the new one, never a truncated one.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tessera {

// Throws InvalidArgument naming the path and the system's reason when it cannot.
void write_file_atomically(const std::string& path, const void* data, size_t size);
// The whole file; throws InvalidArgument naming the path when it cannot be read.
std::vector<char> read_file(const std::string& path);

}  // namespace tessera
