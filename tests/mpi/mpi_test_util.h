// Shared by the multi-rank tests: a fixture holding a world communicator, and a byte buffer of
// any tessera dtype read and written as doubles (what the tests fill with closed-form values
// and check against them).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/dtype.h"

namespace tessera {
namespace testing {

struct Buf {
  DataType dtype;
  std::vector<char> bytes;
  Buf(DataType d, size_t count) : dtype(d), bytes(std::max<size_t>(1, count * dtype_size(d))) {}
  char* data() { return bytes.data(); }
  double at(size_t i) const { return load_as_double(dtype, bytes.data(), i); }
  void set(size_t i, double v) { store_from_double(dtype, bytes.data(), i, v); }
  // `v` as this dtype holds it (rounded or wrapped).
  static double as(DataType d, double v) {
    Buf one(d, 1);
    one.set(0, v);
    return one.at(0);
  }
};

// A small integer in [0, 31] from a hash of (salt, rank, index). Inputs built from it never
// repeat along a buffer, so a chunk or segment placed at a wrong offset reads other values and
// fails (inputs that repeat every k elements pass any shift by a multiple of k); sums of 8 of
// them stay below 256, exact in every dtype (u8 and bf16 included).
inline unsigned hashed_small(unsigned salt, int rank, size_t index) {
  uint64_t z = (static_cast<uint64_t>(index) << 8) + static_cast<uint64_t>(rank) +
               (static_cast<uint64_t>(salt) << 56) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;  // splitmix64's finaliser
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<unsigned>((z ^ (z >> 31)) & 31u);
}

// How far a correctly rounded average may be from the exact one: the sum is exact, but dividing
// (or multiplying by 1/n) rounds once in the accumulation type and once more into a half dtype,
// so one unit in the last place of `want`. Any other difference is a wrong value.
inline double average_tolerance(DataType d, double want) {
  const int bits = d == DataType::kFloat64   ? 52
                   : d == DataType::kFloat32 ? 23
                   : d == DataType::kFloat16 ? 10
                                             : 7;  // bf16
  return std::ldexp(std::fabs(want), -bits);
}

// TESSERA_TEST_LARGEST_ONCE=1, a test-only switch set by scripts/sanitize.sh: the largest counts
// (2^20 elements, default segments) are checked for f32 sum only, not every dtype and op. The
// same code at a fraction of the time under the sanitizers; the main build checks them all.
inline bool largest_once() {
  const char* v = std::getenv("TESSERA_TEST_LARGEST_ONCE");
  return v != nullptr && std::string(v) == "1";
}

const std::vector<DataType> kAllDtypes = {
    DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
    DataType::kInt32,   DataType::kInt64,   DataType::kUInt8};

// One world communicator per test suite (creating it is collective: every rank runs the same
// suites in the same order).
class WorldTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { world_ = comm::Communicator::world().release(); }
  static void TearDownTestSuite() {
    delete world_;
    world_ = nullptr;
  }
  static inline comm::Communicator* world_ = nullptr;
};

}  // namespace testing
}  // namespace tessera
