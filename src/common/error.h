// The tessera error family and the check macros every layer uses.
//
// One error model: exceptions inside the library, a clear message at the CLI. Bad arguments
// and bad input throw InvalidArgument (with what was wrong and what is accepted); broken
// invariants throw InternalError; MPI failures throw CommError; expired deadlines throw
// TimeoutError; device (CUDA) failures throw DeviceError.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
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

// Builds "file:line: message" from any streamable parts.
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

// Bad arguments and bad input: throws tessera::InvalidArgument with file:line and the message.
#define TESSERA_CHECK(cond, ...)                                          \
  do {                                                                    \
    if (!(cond)) {                                                        \
      throw ::tessera::InvalidArgument(                                   \
          ::tessera::detail::format_at(__FILE__, __LINE__, __VA_ARGS__)); \
    }                                                                     \
  } while (0)

#define TESSERA_CHECK_OP_(a, b, op, ...)                                                       \
  do {                                                                                         \
    const auto& tessera_a_ = (a);                                                              \
    const auto& tessera_b_ = (b);                                                              \
    if (!(tessera_a_ op tessera_b_)) {                                                         \
      throw ::tessera::InvalidArgument(                                                        \
          ::tessera::detail::format_at(__FILE__, __LINE__, "expected " #a " " #op " " #b " (", \
                                       tessera_a_, " vs ", tessera_b_, "): ", __VA_ARGS__));   \
    }                                                                                          \
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
