#include "common/strings.h"

namespace tessera {

std::string trim(const std::string& s, const char* space) {
  const size_t b = s.find_first_not_of(space);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(space) - b + 1);
}

}  // namespace tessera
