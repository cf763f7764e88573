// The tessera error family and the check macros every layer uses.
//
// One error model: exceptions inside the library, a clear message at the CLI. Bad arguments
// and bad input throw InvalidArgument (with what was wrong and what is accepted); broken
// invariants throw InternalError; MPI failures throw CommError; expired deadlines throw
// TimeoutError; device (CUDA) failures throw DeviceError.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>

namespace tessera {
namespace detail {

// With TESSERA_ERROR_LOG set (the test suite sets it: tests/CMakeLists.txt), every tessera
// error made appends its message to that file, one line each, so that a test can check every
// error the suite provokes (scripts/error_positions.py: no source positions). Read directly
// rather than through the settings: an error can be made before init and outside any layer.
inline void record_error(const std::string& what) {
  static const char* const path = std::getenv("TESSERA_ERROR_LOG");
  if (path == nullptr || *path == '\0') return;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::FILE* f = std::fopen(path, "a");
  if (f == nullptr) return;
  std::string line = what;
  for (char& c : line) c = (c == '\n') ? ' ' : c;
  std::fprintf(f, "%s\n", line.c_str());
  std::fclose(f);
}

}  // namespace detail

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) { detail::record_error(what); }
  explicit Error(const char* what) : Error(std::string(what)) {}
};

class InvalidArgument : public Error {
 public:
  using Error::Error;
};

class InternalError : public Error {
 public:
  using Error::Error;
};

class CommError : public Error {
 public:
  using Error::Error;
};

class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A device (CUDA) call failed, or an operation on a device stream did: names the call and the
// device's own error string.
class DeviceError : public Error {
 public:
  using Error::Error;
};

namespace detail {

inline void append(std::ostringstream&) {}

template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append(os, rest...);
}

// Builds "file:line: message" from any streamable parts: for internal errors only (a bug's
// report wants the position; what a user reads does not, STYLE.md).
template <typename... Parts>
std::string format_at(const char* file, int line, const Parts&... parts) {
  std::ostringstream os;
  const char* base = file;
  for (const char* p = file; *p != '\0'; ++p) {
    if (*p == '/') base = p + 1;
  }
  os << base << ":" << line << ": ";
  append(os, parts...);
  return os.str();
}

template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream os;
  append(os, parts...);
  return os.str();
}

}  // namespace detail
}  // namespace tessera

// Bad arguments and bad input: throws tessera::InvalidArgument with the message alone (what a
// user reads carries no source position).
#define TESSERA_CHECK(cond, ...)                                                \
  do {                                                                          \
    if (!(cond)) {                                                              \
      throw ::tessera::InvalidArgument(::tessera::detail::concat(__VA_ARGS__)); \
    }                                                                           \
  } while (0)

#define TESSERA_CHECK_OP_(a, b, op, ...)                                                   \
  do {                                                                                     \
    const auto& tessera_a_ = (a);                                                          \
    const auto& tessera_b_ = (b);                                                          \
    if (!(tessera_a_ op tessera_b_)) {                                                     \
      throw ::tessera::InvalidArgument(                                                    \
          ::tessera::detail::concat(__VA_ARGS__, " (expected " #a " " #op " " #b ", got ", \
                                    tessera_a_, " vs ", tessera_b_, ")"));                 \
    }                                                                                      \
  } while (0)

#define TESSERA_CHECK_EQ(a, b, ...) TESSERA_CHECK_OP_(a, b, ==, __VA_ARGS__)
#define TESSERA_CHECK_NE(a, b, ...) TESSERA_CHECK_OP_(a, b, !=, __VA_ARGS__)
#define TESSERA_CHECK_LT(a, b, ...) TESSERA_CHECK_OP_(a, b, <, __VA_ARGS__)
#define TESSERA_CHECK_LE(a, b, ...) TESSERA_CHECK_OP_(a, b, <=, __VA_ARGS__)
#define TESSERA_CHECK_GE(a, b, ...) TESSERA_CHECK_OP_(a, b, >=, __VA_ARGS__)

// Broken invariants (a bug in tessera, not in the caller): throws tessera::InternalError.
#define TESSERA_ASSERT(cond, ...)                                                    \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      throw ::tessera::InternalError(::tessera::detail::format_at(                   \
          __FILE__, __LINE__, "internal error: " #cond " failed. ", ##__VA_ARGS__)); \
    }                                                                                \
  } while (0)
