// The global reshuffle's planning functions, exhaustively over small sizes: each epoch's shards
// partition the data set into 1/N parts in the order of that epoch's permutation, the owners
// agree with the shards, the sends partition what a rank holds, and the ranks' batch k together
// is exactly global batch k of one process with batch N*b (the equivalence the trainer's
// global shuffle offers).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "common/error.h"
#include "data/reshuffle.h"
#include "data/sampler.h"

namespace tessera {
namespace data {
namespace {

TEST(ReshufflePlan, ShardsPartitionEveryEpochsPermutation) {
  for (int64_t size = 1; size <= 23; ++size) {
    for (int ranks = 1; ranks <= std::min<int64_t>(size, 5); ++ranks) {
      for (int64_t epoch = 0; epoch < 3; ++epoch) {
        const std::vector<int64_t> order = epoch_order(size, 9, epoch);
        const std::vector<int> owners = global_shuffle_owners(size, 9, epoch, ranks);
        std::vector<int> seen(static_cast<size_t>(size), 0);
        for (int r = 0; r < ranks; ++r) {
          const std::vector<int64_t> shard = global_shuffle_shard(size, 9, epoch, r, ranks);
          // 1/N of the data: floor or ceil of size/ranks, the first (size % ranks) ranks one more.
          ASSERT_EQ(static_cast<int64_t>(shard.size()), size / ranks + (r < size % ranks ? 1 : 0));
          for (size_t j = 0; j < shard.size(); ++j) {
            ASSERT_EQ(shard[j], order[j * static_cast<size_t>(ranks) + static_cast<size_t>(r)]);
            ASSERT_EQ(owners[static_cast<size_t>(shard[j])], r);
            ++seen[static_cast<size_t>(shard[j])];
          }
        }
        ASSERT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }))
            << "size " << size << " ranks " << ranks << " epoch " << epoch;
      }
    }
  }
  EXPECT_THROW(global_shuffle_shard(3, 0, 0, 0, 4), InvalidArgument);  // fewer samples than ranks
  EXPECT_THROW(global_shuffle_shard(8, 0, 0, 2, 2), InvalidArgument);  // not a rank
}

TEST(ReshufflePlan, SendsPartitionWhatARankHoldsByNewOwner) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    const int64_t size = 17;
    for (int r = 0; r < ranks; ++r) {
      const std::vector<int64_t> held = global_shuffle_shard(size, 1, 0, r, ranks);
      const std::vector<int> owners = global_shuffle_owners(size, 1, 1, ranks);
      const auto sends = plan_sends(held, owners, ranks);
      ASSERT_EQ(sends.size(), static_cast<size_t>(ranks));
      size_t total = 0;
      for (int to = 0; to < ranks; ++to) {
        for (int64_t g : sends[static_cast<size_t>(to)])
          ASSERT_EQ(owners[static_cast<size_t>(g)], to);
        total += sends[static_cast<size_t>(to)].size();
      }
      ASSERT_EQ(total, held.size());
    }
  }
  EXPECT_THROW(plan_sends({40}, std::vector<int>(10, 0), 1), InvalidArgument);
}

TEST(ReshufflePlan, RankBatchesTogetherAreOneProcessesGlobalBatch) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    for (int64_t b = 1; b <= 3; ++b) {
      const int64_t size = 29;
      ShardPlan plan;
      plan.dataset_size = size;
      plan.ranks = ranks;
      plan.batch = b;
      const int64_t steps = plan.steps_per_epoch();
      for (int64_t epoch = 0; epoch < 2; ++epoch) {
        const std::vector<int64_t> whole = global_shuffle_shard(size, 4, epoch, 0, 1);
        for (int64_t k = 0; k < steps; ++k) {
          std::multiset<int64_t> ranks_batch,
              one_process(whole.begin() + k * ranks * b, whole.begin() + (k + 1) * ranks * b);
          for (int r = 0; r < ranks; ++r) {
            const std::vector<int64_t> shard = global_shuffle_shard(size, 4, epoch, r, ranks);
            ranks_batch.insert(shard.begin() + k * b, shard.begin() + (k + 1) * b);
          }
          ASSERT_EQ(ranks_batch, one_process) << ranks << " ranks, batch " << b << ", step " << k;
        }
      }
    }
  }
}

}  // namespace
}  // namespace data
}  // namespace tessera
