// The benchmarks' median: odd and even counts, order-independent, empty input refused.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/stats.h"

namespace tessera {
namespace {

TEST(Stats, Median) {
  EXPECT_DOUBLE_EQ(median({3.0}), 3.0);
  EXPECT_DOUBLE_EQ(median({5.0, 1.0, 3.0}), 3.0);
  EXPECT_DOUBLE_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_DOUBLE_EQ(median({7.0, 7.0, 1.0, 9.0, 7.0, 2.0}), 7.0);
  EXPECT_DOUBLE_EQ(median({10.0, -2.0}), 4.0);
  EXPECT_THROW(median({}), InvalidArgument);
}

}  // namespace
}  // namespace tessera
