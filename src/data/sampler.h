// Which samples each rank trains on: a pure function of (data set size, seed, epoch, step,
// ranks, batch). Epoch e visits a permutation of the data set drawn from (seed, e); global
// batch k of the epoch is positions [k*G, (k+1)*G) of it (G = ranks * batch), and rank r takes
// its slice [k*G + r*batch, k*G + (r+1)*batch). So N ranks with batch b see, step by step,
// exactly the samples one rank with batch N*b sees, in the same order.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera {
namespace data {

struct ShardPlan {
  int64_t dataset_size = 0;
  uint64_t seed = 0;
  int ranks = 1;
  int64_t batch = 1;  // per rank
  // Whole global batches per epoch (the remainder of the data set is skipped that epoch).
  int64_t steps_per_epoch() const;
};

// The permutation of epoch `epoch`.
std::vector<int64_t> epoch_order(int64_t dataset_size, uint64_t seed, int64_t epoch);
// The order in which rank `rank` visits its shard of `shard_size` samples in epoch `epoch`
// (the in-memory store's shuffle): a permutation drawn from (seed, rank, epoch).
std::vector<int64_t> shard_epoch_order(int64_t shard_size, uint64_t seed, int rank, int64_t epoch);
// Rank `rank`'s samples for global step `step` (epoch = step / steps_per_epoch).
std::vector<int64_t> batch_indices(const ShardPlan& plan, int64_t step, int rank);
// The same from the epoch's order, drawn once per epoch by the caller (epoch_order is
// O(dataset size)); `step` is the global step, `order` that of its epoch.
std::vector<int64_t> batch_indices(const ShardPlan& plan, const std::vector<int64_t>& order,
                                   int64_t step, int rank);

}  // namespace data
}  // namespace tessera
