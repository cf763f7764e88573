// Uneven blocks along dimension 0 (torch/uneven_blocks.h): Horovod's split, the splits check,
// and padding that round-trips for every count vector up to 4 ranks of up to 5 rows each.
#include <gtest/gtest.h>

#include <functional>
#include <numeric>

#include "common/error.h"
#include "torch/uneven_blocks.h"

namespace tessera {
namespace detail {
namespace {

TEST(UnevenBlocks, ScatterRowsGivesTheFirstRanksOneMore) {
  for (int n = 1; n <= 6; ++n) {
    for (int64_t rows = 0; rows <= 20; ++rows) {
      const std::vector<int64_t> c = scatter_rows(rows, n);
      ASSERT_EQ(c.size(), static_cast<size_t>(n));
      EXPECT_EQ(std::accumulate(c.begin(), c.end(), int64_t{0}), rows);
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(c[static_cast<size_t>(r)], rows / n + (r < rows % n ? 1 : 0)) << rows << "/" << n;
      }
    }
  }
}

TEST(UnevenBlocks, SplitsAreCheckedSayingWhatIsAccepted) {
  EXPECT_EQ(checked_splits(6, 3, {}), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(checked_splits(5, 2, {3, 2}), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(checked_splits(0, 2, {0, 0}), (std::vector<int64_t>{0, 0}));
  try {
    checked_splits(5, 2, {});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("must divide by the 2 ranks"), std::string::npos);
  }
  for (const std::vector<int64_t>& bad :
       std::vector<std::vector<int64_t>>{{1, 1}, {5}, {6, -1}, {1, 2, 2}}) {
    try {
      checked_splits(5, 2, bad);
      FAIL();
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("adding up to the first dimension, 5"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(checked_splits(-1, 2, {}), InvalidArgument);  // a 0-d tensor
}

TEST(UnevenBlocks, PaddingRoundTripsForEveryCountVector) {
  // Every vector of n counts in 0..5, n = 1..4: rows keep their order and values, each block
  // starts at j * block, and the padding is zeros.
  for (size_t n = 1; n <= 4; ++n) {
    std::vector<int64_t> counts(n, 0);
    std::function<void(size_t)> each = [&](size_t k) {
      if (k < n) {
        for (int64_t c = 0; c <= 5; ++c) {
          counts[k] = c;
          each(k + 1);
        }
        return;
      }
      const int64_t rows = std::accumulate(counts.begin(), counts.end(), int64_t{0});
      const int64_t block = *std::max_element(counts.begin(), counts.end());
      const torch::Tensor t = torch::arange(1, rows * 2 + 1, torch::kLong).reshape({rows, 2});
      const torch::Tensor padded = pad_blocks(t, counts, block);
      ASSERT_EQ(padded.size(0), block * static_cast<int64_t>(n));
      int64_t from = 0;
      for (size_t j = 0; j < n; ++j) {
        const int64_t at = static_cast<int64_t>(j) * block;
        EXPECT_TRUE(torch::equal(padded.narrow(0, at, counts[j]), t.narrow(0, from, counts[j])));
        EXPECT_EQ(padded.narrow(0, at + counts[j], block - counts[j]).abs().sum().item<int64_t>(),
                  0);
        from += counts[j];
      }
      EXPECT_TRUE(torch::equal(unpad_blocks(padded, counts, block), t));
    };
    each(0);
  }
}

}  // namespace
}  // namespace detail
}  // namespace tessera
