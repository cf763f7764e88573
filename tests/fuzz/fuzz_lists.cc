// libFuzzer target: the data-set list grammars (data/lists.h): the CSV manifest, the VOC split
// files and classes.txt. Any bytes must give entries that keep the grammar's promises or an
// InvalidArgument naming the file.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "data/lists.h"

namespace {

bool trimmed(const std::string& s) {
  const std::string ws = " \t\r\n";
  return !s.empty() && ws.find(s.front()) == std::string::npos &&
         ws.find(s.back()) == std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::data;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    int last = 0;
    for (const ManifestEntry& e : parse_manifest(text, "fuzz.csv")) {
      if (!trimmed(e.path) || e.label < 0 || e.line <= last) std::abort();
      last = e.line;
    }
  } catch (const tessera::InvalidArgument&) {
  }
  try {
    for (const std::string& id : parse_split(text, "fuzz.txt")) {
      if (!trimmed(id) || id.find('/') != std::string::npos || id == "..") std::abort();
    }
  } catch (const tessera::InvalidArgument&) {
  }
  try {
    for (const std::string& name : parse_class_names(text, "classes.txt")) {
      if (name.empty() || name.back() == ' ' || name.back() == '\r') std::abort();
    }
  } catch (const tessera::InvalidArgument&) {
  }
  return 0;
}
