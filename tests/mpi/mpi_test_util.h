// Shared by the multi-rank tests: a fixture holding a world communicator, and a byte buffer of
// any tessera dtype read and written as doubles (what the tests fill with closed-form values
// and check against them).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
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
