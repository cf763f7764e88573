#include "data/lists.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/strings.h"

namespace tessera {
namespace data {
namespace {

// White space around fields and ids, with the \r of Windows line ends.
constexpr const char* kLineSpace = " \t\r\n";

// Line `n` of `source` for messages: printable, and short enough for one line.
std::string quoted(const std::string& line) {
  std::string out;
  for (char c : line.substr(0, 120)) {
    out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  }
  return "'" + out + (line.size() > 120 ? "...'" : "'");
}

template <typename F>
void for_each_line(const std::string& text, const std::string& source, F f) {
  TESSERA_CHECK(text.find('\0') == std::string::npos, "'", source,
                "' holds a NUL byte: it is not a text file");
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) f(n, line);
}

}  // namespace

std::vector<ManifestEntry> parse_manifest(const std::string& text, const std::string& source) {
  std::vector<ManifestEntry> out;
  for_each_line(text, source, [&](int n, const std::string& raw) {
    const std::string line = trim(raw, kLineSpace);
    if (line.empty() || (n == 1 && line == "path,label")) return;
    const size_t comma = line.rfind(',');
    TESSERA_CHECK(comma != std::string::npos, source, ":", n, ": expected 'path,label', got ",
                  quoted(line));
    const std::string path = trim(line.substr(0, comma), kLineSpace),
                      label = trim(line.substr(comma + 1), kLineSpace);
    TESSERA_CHECK(!path.empty(), source, ":", n, ": the path before the label is empty in ",
                  quoted(line));
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(label.c_str(), &end, 10);
    TESSERA_CHECK(!label.empty() && *end == '\0' && errno == 0 && v >= 0, source, ":", n,
                  ": label ", quoted(label), " is not an integer >= 0");
    out.push_back({path, static_cast<int64_t>(v), n});
  });
  TESSERA_CHECK(!out.empty(), "manifest '", source, "' lists no samples");
  return out;
}

std::vector<std::string> parse_split(const std::string& text, const std::string& source) {
  std::vector<std::string> out;
  for_each_line(text, source, [&](int n, const std::string& raw) {
    const std::string id = trim(raw, kLineSpace);
    if (id.empty()) return;
    TESSERA_CHECK(id.find_first_of("/\\") == std::string::npos && id != "." && id != "..", source,
                  ":", n, ": id ", quoted(id),
                  " is not a file name stem (no '/', '\\', '.' or '..')");
    out.push_back(id);
  });
  TESSERA_CHECK(!out.empty(), "split file '", source, "' lists no ids");
  return out;
}

std::vector<std::string> parse_class_names(const std::string& text, const std::string& source) {
  std::vector<std::string> out;
  for_each_line(text, source, [&](int, std::string line) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) out.push_back(line);
  });
  TESSERA_CHECK(!out.empty(), "'", source, "' names no class");
  return out;
}

std::string read_text_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in.good(), what, " '", path, "' is missing or unreadable");
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace data
}  // namespace tessera
