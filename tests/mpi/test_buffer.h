// A byte buffer of any tessera dtype, read and written as doubles: what the multi-rank tests
// fill with closed-form values and check against them.
#pragma once

#include <algorithm>
#include <vector>

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

const std::vector<DataType> kAllDtypes = {DataType::kFloat32, DataType::kFloat64,
                                          DataType::kFloat16, DataType::kBFloat16,
                                          DataType::kInt32,   DataType::kInt64,
                                          DataType::kUInt8};

}  // namespace testing
}  // namespace tessera
