// The global reshuffle: every epoch a new permutation of the whole data set, while each rank
// still holds 1/N of it in memory. Epoch e's permutation P_e = epoch_order(size, seed, e);
// rank r's shard for epoch e is positions r, r + N, r + 2N, ... of P_e, in that order. At an
// epoch boundary every rank sends each sample it holds to that sample's owner in the new epoch
// (one alltoallv of the kept bytes, through whatever connects the ranks: the caller's Exchange)
// and no file is read.
//
// With it, global batch k of an epoch (positions [kNb, (k+1)Nb) of P_e) is exactly the union of
// the ranks' batches k, so N ranks with batch b train on the samples one process with batch Nb
// would, step by step.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/shard_store.h"

namespace tessera {
namespace data {

// Rank `rank`'s shard in epoch `epoch`, in order (pure).
std::vector<int64_t> global_shuffle_shard(int64_t size, uint64_t seed, int64_t epoch, int rank,
                                          int ranks);
// The owner of every sample (by global index) in epoch `epoch` (pure).
std::vector<int> global_shuffle_owners(int64_t size, uint64_t seed, int64_t epoch, int ranks);
// For the samples `held` by a rank, the ones it sends to each rank (index: destination rank),
// in the order held (pure). sends[me] are the samples it keeps.
std::vector<std::vector<int64_t>> plan_sends(const std::vector<int64_t>& held,
                                             const std::vector<int>& owners, int ranks);

struct ReshuffleStats {
  int64_t samples_sent = 0, samples_received = 0, samples_kept = 0;
  uint64_t bytes_sent = 0, bytes_received = 0;
  double seconds = 0;
};

// How the reshuffle reaches the other ranks, given by the caller (the data layer knows no
// transport; tessera train gives tessera's alltoall): this rank's place among the data set's
// ranks, and one collective exchange that sends counts[j] consecutive bytes of `send` to rank
// j and returns what every rank sent to this one, in rank order.
struct Exchange {
  int rank = 0, ranks = 1;
  std::function<std::string(const std::string& send, const std::vector<size_t>& counts)> alltoallv;
};

// Moves `store` (holding some epoch's shard) to epoch `epoch`'s shard. Collective over the
// exchange's ranks.
ReshuffleStats global_reshuffle(const Exchange& exchange, ShardedStore& store, uint64_t seed,
                                int64_t epoch);

}  // namespace data
}  // namespace tessera
