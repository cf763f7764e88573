#include "data/reshuffle.h"

#include <chrono>
#include <cstring>

#include "common/error.h"
#include "data/sampler.h"

namespace tessera {
namespace data {
namespace {

void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

uint64_t get_u64(const char*& p, const char* end) {
  TESSERA_CHECK(end - p >= 8, "reshuffle: a received sample record is cut short");
  uint64_t v;
  std::memcpy(&v, p, 8);
  p += 8;
  return v;
}

}  // namespace

std::vector<int64_t> global_shuffle_shard(int64_t size, uint64_t seed, int64_t epoch, int rank,
                                          int ranks) {
  TESSERA_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "rank ", rank, " of ", ranks,
                " is not a rank");
  TESSERA_CHECK(size >= ranks, "the data set has ", size, " samples, too few for ", ranks,
                " ranks to hold one each");
  const std::vector<int64_t> order = epoch_order(size, seed, epoch);
  std::vector<int64_t> mine;
  for (int64_t k = rank; k < size; k += ranks) mine.push_back(order[static_cast<size_t>(k)]);
  return mine;
}

std::vector<int> global_shuffle_owners(int64_t size, uint64_t seed, int64_t epoch, int ranks) {
  TESSERA_CHECK(ranks >= 1, "ranks must be >= 1, got ", ranks);
  const std::vector<int64_t> order = epoch_order(size, seed, epoch);
  std::vector<int> owners(static_cast<size_t>(size));
  for (int64_t k = 0; k < size; ++k) {
    owners[static_cast<size_t>(order[static_cast<size_t>(k)])] = static_cast<int>(k % ranks);
  }
  return owners;
}

std::vector<std::vector<int64_t>> plan_sends(const std::vector<int64_t>& held,
                                             const std::vector<int>& owners, int ranks) {
  std::vector<std::vector<int64_t>> sends(static_cast<size_t>(ranks));
  for (int64_t g : held) {
    TESSERA_CHECK(g >= 0 && g < static_cast<int64_t>(owners.size()), "sample ", g,
                  " is outside the data set of ", owners.size());
    const int to = owners[static_cast<size_t>(g)];
    TESSERA_CHECK(to >= 0 && to < ranks, "sample ", g, " has owner ", to, " outside 0..",
                  ranks - 1);
    sends[static_cast<size_t>(to)].push_back(g);
  }
  return sends;
}

ReshuffleStats global_reshuffle(const Exchange& exchange, ShardedStore& store, uint64_t seed,
                                int64_t epoch) {
  const auto t0 = std::chrono::steady_clock::now();
  const int ranks = exchange.ranks;
  const int me = exchange.rank;
  const int64_t size = static_cast<int64_t>(store.list().samples.size());
  const std::vector<int> owners = global_shuffle_owners(size, seed, epoch, ranks);
  const std::vector<std::vector<int64_t>> sends = plan_sends(store.indices(), owners, ranks);
  std::unordered_map<int64_t, ShardedStore::Held> held = store.take();

  // Records: [global index][image bytes][mask bytes][image][mask], packed by destination.
  ReshuffleStats stats;
  std::string send;
  std::vector<size_t> send_counts(static_cast<size_t>(ranks), 0);
  std::unordered_map<int64_t, ShardedStore::Held> kept;
  for (int to = 0; to < ranks; ++to) {
    const size_t before = send.size();
    for (int64_t g : sends[static_cast<size_t>(to)]) {
      auto it = held.find(g);
      if (to == me) {
        kept.emplace(g, std::move(it->second));
        ++stats.samples_kept;
        continue;
      }
      put_u64(send, static_cast<uint64_t>(g));
      put_u64(send, it->second.image.size());
      put_u64(send, it->second.mask.size());
      send += it->second.image;
      send += it->second.mask;
      held.erase(it);  // free as we go: the peak is one shard plus one send buffer
      ++stats.samples_sent;
    }
    send_counts[static_cast<size_t>(to)] = send.size() - before;
  }
  held.clear();
  stats.bytes_sent = send.size();

  const std::string recv = exchange.alltoallv(send, send_counts);
  stats.bytes_received = recv.size();
  std::string().swap(send);

  const char* p = recv.data();
  const char* end = p + recv.size();
  while (p < end) {
    const int64_t g = static_cast<int64_t>(get_u64(p, end));
    const uint64_t ni = get_u64(p, end), nm = get_u64(p, end);
    TESSERA_CHECK(static_cast<uint64_t>(end - p) >= ni + nm,
                  "reshuffle: a received sample record is cut short");
    TESSERA_CHECK(g >= 0 && g < size && owners[static_cast<size_t>(g)] == me, "reshuffle: rank ",
                  me, " received sample ", g, ", which is not its own in epoch ", epoch);
    ShardedStore::Held h;
    h.image.assign(p, ni);
    h.mask.assign(p + ni, nm);
    p += ni + nm;
    TESSERA_CHECK(kept.emplace(g, std::move(h)).second, "reshuffle: sample ", g, " received twice");
    ++stats.samples_received;
  }
  std::vector<int64_t> shard = global_shuffle_shard(size, seed, epoch, me, ranks);
  TESSERA_CHECK(kept.size() == shard.size(), "reshuffle: rank ", me, " holds ", kept.size(),
                " samples for epoch ", epoch, " but its shard has ", shard.size(),
                " (the ranks held different epochs' shards)");
  store.reassign(std::move(shard), std::move(kept));
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

}  // namespace data
}  // namespace tessera
