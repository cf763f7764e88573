// Small string helpers shared by the text grammars (knob values, selector ranges, data-set
// lists), so they all agree on what counts as surrounding white space.
#pragma once

#include <string>

namespace tessera {

// `s` without the leading and trailing characters in `space` (spaces and tabs by default).
std::string trim(const std::string& s, const char* space = " \t");

}  // namespace tessera
