// Small string helpers: trim, shared by the text grammars (knob values, selector ranges, data-set
// lists) so they agree on what counts as surrounding white space; and one byte digest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera {

// `s` without the leading and trailing characters in `space` (spaces and tabs by default).
std::string trim(const std::string& s, const char* space = " \t");

// FNV-1a 64 of `size` bytes: the same digest on every machine and build (std::hash is not
// promised to be). Used to compare descriptions across ranks and to check checkpoints.
uint64_t fnv1a64(const void* data, size_t size);
inline uint64_t fnv1a64(const std::string& s) { return fnv1a64(s.data(), s.size()); }

}  // namespace tessera
