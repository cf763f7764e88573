// The text files a data set names its samples in, parsed from their bytes: the CSV manifest
// ("path,label" lines), the split files of the VOC layout (one id per line) and classes.txt (one
// name per line). Pure functions without file system or libtorch, so the readers in formats.cc
// and dataset.cc share one grammar and the fuzz targets (tests/fuzz) reach all of it. Each
// error is an InvalidArgument naming `source` and the line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {
namespace data {

struct ManifestEntry {
  std::string path;  // as written, trimmed; relative paths are the caller's to resolve
  int64_t label = 0;
  int line = 0;  // 1-based
};
// "path,label" per line: the label is the text after the last comma, an integer >= 0; the path
// is the text before it, not empty (it may itself hold commas). Blank lines and a first line
// "path,label" are skipped. A NUL byte, an empty path or a label that is not an integer >= 0
// is an error. An empty list is an error too: a manifest with no sample is a mistake.
std::vector<ManifestEntry> parse_manifest(const std::string& text, const std::string& source);

// One id per line (VOC's ImageSets/Segmentation/<split>.txt); blank lines skipped. An id is a
// file name stem: it must not hold '/', '\\', NUL or be "." or "..", so a split file cannot
// name a file outside the data set's folders. No id at all is an error.
std::vector<std::string> parse_split(const std::string& text, const std::string& source);

// classes.txt: one class name per line, trailing spaces and '\r' dropped, blank lines skipped.
// No name at all, or a NUL byte, is an error.
std::vector<std::string> parse_class_names(const std::string& text, const std::string& source);

// Reads a whole (small) text file; a missing or unreadable file is an error naming `what`.
std::string read_text_file(const std::string& path, const char* what);

}  // namespace data
}  // namespace tessera
