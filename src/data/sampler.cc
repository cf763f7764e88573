#include "data/sampler.h"

#include <numeric>
#include <random>

#include "common/error.h"

namespace tessera {
namespace data {

int64_t ShardPlan::steps_per_epoch() const {
  const int64_t global = static_cast<int64_t>(ranks) * batch;
  TESSERA_CHECK(batch > 0, "the batch size must be > 0, got ", batch);
  TESSERA_CHECK(dataset_size >= global, "the data set has ", dataset_size,
                " samples, fewer than one global batch of ", global, " (", ranks, " ranks x ",
                batch, "): raise its size or lower --batch-size");
  return dataset_size / global;
}

std::vector<int64_t> epoch_order(int64_t dataset_size, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(dataset_size));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::mt19937_64 rng(seed * 6364136223846793005ull + static_cast<uint64_t>(epoch) + 1);
  // Fisher-Yates with our own index draw: std::shuffle's use of the engine is not specified,
  // and the order must be the same with every standard library.
  for (size_t i = order.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng() % i);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

std::vector<int64_t> shard_epoch_order(int64_t shard_size, uint64_t seed, int rank, int64_t epoch) {
  TESSERA_CHECK(rank >= 0, "rank must be >= 0, got ", rank);
  // A distinct stream per rank: (seed, rank) mixed with an odd multiplier (a bijection).
  return epoch_order(shard_size, (seed + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(rank) + 1)),
                     epoch);
}

std::vector<int64_t> batch_indices(const ShardPlan& plan, int64_t step, int rank) {
  const int64_t epoch = step / plan.steps_per_epoch();
  return batch_indices(plan, epoch_order(plan.dataset_size, plan.seed, epoch), step, rank);
}

std::vector<int64_t> batch_indices(const ShardPlan& plan, const std::vector<int64_t>& order,
                                   int64_t step, int rank) {
  TESSERA_CHECK(rank >= 0 && rank < plan.ranks, "rank ", rank, " outside 0..", plan.ranks - 1);
  TESSERA_CHECK_EQ(static_cast<int64_t>(order.size()), plan.dataset_size,
                   "the order must be a permutation of the data set");
  const int64_t k = step % plan.steps_per_epoch();
  const int64_t begin = k * plan.ranks * plan.batch + rank * plan.batch;
  return std::vector<int64_t>(order.begin() + begin, order.begin() + begin + plan.batch);
}

}  // namespace data
}  // namespace tessera
