// Small statistics shared by the benchmarks.
#pragma once

#include <algorithm>
#include <vector>

#include "common/error.h"

namespace tessera {

// The median: the middle value, or the mean of the two middle values for an even count.
inline double median(std::vector<double> v) {
  TESSERA_CHECK(!v.empty(), "the median of no values");
  const size_t n = v.size();
  std::nth_element(v.begin(), v.begin() + static_cast<long>(n / 2), v.end());
  const double upper = v[n / 2];
  if (n % 2 == 1) return upper;
  return 0.5 * (*std::max_element(v.begin(), v.begin() + static_cast<long>(n / 2)) + upper);
}

}  // namespace tessera
