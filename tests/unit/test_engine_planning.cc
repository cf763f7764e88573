// The engine's pure pieces: spec comparison, the response cache (LRU, bit reuse, identical
// mapping for identical histories) and the fusion planner (exhaustive properties over random
// ready lists).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "common/error.h"
#include "common/reduce.h"
#include "engine/bit_vector.h"
#include "engine/coordinator.h"
#include "engine/fusion.h"
#include "engine/idle_backoff.h"
#include "engine/response_cache.h"
#include "engine/tensor_spec.h"
#include "engine/wire.h"

namespace tessera {
namespace engine {
namespace {

TensorSpec spec(const std::string& name, std::vector<int64_t> shape = {4},
                DataType dt = DataType::kFloat32) {
  TensorSpec s;
  s.name = name;
  s.shape = std::move(shape);
  s.dtype = dt;
  return s;
}

TEST(TensorSpec, DifferenceNamesTheFirstFieldThatDiffers) {
  TensorSpec a = spec("w", {3, 4});
  EXPECT_EQ(spec_difference(a, a), "");
  TensorSpec b = a;
  b.dtype = DataType::kFloat16;
  EXPECT_EQ(spec_difference(a, b), "dtype f32 vs f16");
  b = a;
  b.shape = {3, 5};
  EXPECT_EQ(spec_difference(a, b), "shape [3, 4] vs [3, 5]");
  b = a;
  b.reduce_op = ReduceOp::kMax;
  EXPECT_EQ(spec_difference(a, b), "reduce op sum vs max");
  b = a;
  b.op = OpType::kBroadcast;
  EXPECT_EQ(spec_difference(a, b), "op allreduce vs broadcast");
  // allgather: the first dimension may differ, the others may not.
  a.op = b.op = OpType::kAllgather;
  b.shape = {7, 4};
  EXPECT_EQ(spec_difference(a, b), "");
  b.shape = {7, 5};
  EXPECT_EQ(spec_difference(a, b), "shape [3, 4] vs [7, 5]");
  a.op = b.op = OpType::kBroadcast;
  b.shape = a.shape;
  b.root = 2;
  EXPECT_EQ(spec_difference(a, b), "root 0 vs 2");
  b.root = 0;
  b.postscale = 0.5;
  EXPECT_EQ(spec_difference(a, b), "scale factors (1, 1) vs (1, 0.5)");
  EXPECT_EQ(spec(" x", {2, 3}).bytes(), 24u);
  EXPECT_THROW(spec("neg", {2, -1}).elements(), InvalidArgument);
}

TEST(ResponseCache, HitMissInvalidAndBitsFromZero) {
  ResponseCache c(4);
  EXPECT_EQ(c.lookup(spec("a")).state, ResponseCache::State::kMiss);
  EXPECT_EQ(c.put(spec("a")), 0);
  EXPECT_EQ(c.put(spec("b")), 1);
  EXPECT_EQ(c.lookup(spec("a")).state, ResponseCache::State::kHit);
  EXPECT_EQ(c.lookup(spec("b")).bit, 1);
  const auto inv = c.lookup(spec("a", {5}));
  EXPECT_EQ(inv.state, ResponseCache::State::kInvalid);
  EXPECT_EQ(inv.bit, 0);
  // Re-putting under the same name keeps the bit and takes the new spec.
  EXPECT_EQ(c.put(spec("a", {5})), 0);
  EXPECT_EQ(c.lookup(spec("a", {5})).state, ResponseCache::State::kHit);
  EXPECT_EQ(c.size(), 2u);
}

TEST(ResponseCache, EvictsLeastRecentlyUsedAndReusesItsBit) {
  ResponseCache c(3);
  c.put(spec("a"));  // bit 0
  c.put(spec("b"));  // bit 1
  c.put(spec("c"));  // bit 2
  c.touch(0);        // order now b, c, a
  EXPECT_EQ(c.lru_order(), (std::vector<int>{1, 2, 0}));
  EXPECT_EQ(c.put(spec("d")), 1);  // evicts b, reuses its bit
  EXPECT_EQ(c.lookup(spec("b")).state, ResponseCache::State::kMiss);
  EXPECT_EQ(c.spec(1).name, "d");
  EXPECT_EQ(c.bit_span(), 3u);
  c.erase(2);
  EXPECT_EQ(c.bit_span(), 2u);  // the vote shrinks with the highest bit in use
  c.erase(0);
  EXPECT_EQ(c.put(spec("e")), 0);  // lowest free bit first
  EXPECT_EQ(c.put(spec("f")), 2);
  EXPECT_EQ(c.size(), 3u);
}

TEST(ResponseCache, OffWhenCapacityZero) {
  ResponseCache c(0);
  EXPECT_EQ(c.put(spec("a")), -1);
  EXPECT_EQ(c.lookup(spec("a")).state, ResponseCache::State::kMiss);
  EXPECT_EQ(c.size(), 0u);
}

// Two caches fed the same history (as every rank is) hold the same name-to-bit mapping and LRU
// order at every step, through thousands of random puts, touches, erasures and evictions.
TEST(ResponseCache, IdenticalHistoriesGiveIdenticalMappings) {
  for (size_t capacity : {1u, 2u, 7u, 64u}) {
    ResponseCache a(capacity), b(capacity);
    std::mt19937 rng(static_cast<unsigned>(capacity));
    for (int step = 0; step < 5000; ++step) {
      const int what = static_cast<int>(rng() % 3);
      const std::string name = "t" + std::to_string(rng() % (capacity * 2 + 3));
      if (what == 0) {
        const TensorSpec s = spec(name, {static_cast<int64_t>(rng() % 3 + 1)});
        ASSERT_EQ(a.put(s), b.put(s));
      } else {
        const auto l = a.lookup(spec(name));
        ASSERT_EQ(l.bit, b.lookup(spec(name)).bit);
        if (l.bit >= 0) {
          if (what == 1) {
            a.touch(l.bit);
            b.touch(l.bit);
          } else {
            a.erase(l.bit);
            b.erase(l.bit);
          }
        }
      }
      ASSERT_LE(a.size(), capacity);
      ASSERT_EQ(a.lru_order(), b.lru_order());
      for (int bit : a.lru_order()) ASSERT_EQ(a.spec(bit).name, b.spec(bit).name);
    }
  }
}

// Properties of plan_fusion on random ready lists: a partition, threshold respected, batches
// fusable, groups whole unless larger than the threshold, deterministic.
TEST(BitVector, BitsLandInTheirWordAndTheAndOfWordsIsTheIntersection) {
  std::mt19937 rng(7);
  for (size_t bits : {1ul, 2ul, 63ul, 64ul, 65ul, 163ul, 1026ul}) {
    BitVector a(bits), b(bits);
    EXPECT_EQ(a.num_words(), (bits + 63) / 64);
    std::set<size_t> in_a, in_b;
    for (size_t k = 0; k < bits / 2 + 1; ++k) {
      const size_t i = rng() % bits, j = rng() % bits;
      a.set(i);
      b.set(j);
      in_a.insert(i);
      in_b.insert(j);
    }
    for (size_t i = 0; i < bits; ++i) {
      ASSERT_EQ(a.test(i), in_a.count(i) == 1) << bits << " bit " << i;
      // Bit i is bit i % 64 of word i / 64, the layout every rank must share.
      const uint64_t word = static_cast<uint64_t>(a.words()[i / 64]);
      ASSERT_EQ((word >> (i % 64)) & 1u, in_a.count(i)) << bits << " bit " << i;
    }
    // The vote: a bitwise AND of the words (what the allreduce computes between two ranks).
    reduce(DataType::kInt64, ReduceOp::kBitAnd, a.words(), b.words(), a.words(), a.num_words());
    for (size_t i = 0; i < bits; ++i) {
      ASSERT_EQ(a.test(i), in_a.count(i) == 1 && in_b.count(i) == 1) << bits << " bit " << i;
    }
  }
}

TEST(Fusion, RandomListsSatisfyEveryRule) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const size_t n = rng() % 40;
    const size_t threshold = (trial % 10 == 0) ? 0 : (rng() % 4096) + 1;
    std::vector<TensorSpec> ready;
    for (size_t i = 0; i < n; ++i) {
      TensorSpec s = spec("t" + std::to_string(i), {static_cast<int64_t>(rng() % 600)},
                          rng() % 5 == 0 ? DataType::kFloat16 : DataType::kFloat32);
      if (rng() % 7 == 0) s.op = OpType::kBroadcast;
      if (rng() % 9 == 0) s.reduce_op = ReduceOp::kMax;
      s.group = rng() % 3 == 0 ? static_cast<int>(rng() % 4) : -1;
      ready.push_back(s);
    }
    const auto batches = plan_fusion(ready, threshold);
    ASSERT_EQ(batches, plan_fusion(ready, threshold));  // deterministic
    std::vector<int> seen(n, 0);
    std::vector<std::set<size_t>> batches_of_group(4);
    std::vector<size_t> group_bytes(4, 0);
    for (const TensorSpec& s : ready) {
      if (s.group >= 0) group_bytes[static_cast<size_t>(s.group)] += s.bytes();
    }
    for (size_t b = 0; b < batches.size(); ++b) {
      const FusionBatch& batch = batches[b];
      ASSERT_FALSE(batch.items.empty());
      size_t bytes = 0;
      for (size_t i : batch.items) {
        ++seen[i];
        bytes += ready[i].bytes();
        if (batch.items.size() > 1) {
          EXPECT_TRUE(fusable(ready[i], ready[batch.items.front()])) << "trial " << trial;
        }
        if (ready[i].group >= 0) batches_of_group[static_cast<size_t>(ready[i].group)].insert(b);
      }
      EXPECT_EQ(bytes, batch.bytes);
      if (batch.items.size() > 1) {
        EXPECT_LE(bytes, threshold) << "trial " << trial;
      }
    }
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "trial " << trial << " item " << i;
    // A group whose members all fuse with each other and fit under the threshold is one batch.
    std::vector<const TensorSpec*> first(4, nullptr);
    std::vector<bool> fusable_group(4, threshold > 0);
    for (const TensorSpec& s : ready) {
      if (s.group < 0) continue;
      const size_t g = static_cast<size_t>(s.group);
      if (first[g] == nullptr) first[g] = &s;
      fusable_group[g] = fusable_group[g] && s.op == OpType::kAllreduce && fusable(s, *first[g]);
    }
    for (size_t g = 0; g < 4; ++g) {
      if (fusable_group[g] && group_bytes[g] <= threshold) {
        EXPECT_LE(batches_of_group[g].size(), 1u) << "trial " << trial << " group " << g;
      }
    }
  }
}

TEST(Fusion, PacksSmallTensorsPastALargeOne) {
  // 3 tensors of 400 B, 4000 B, 400 B with a 1000 B threshold: the two small ones fuse.
  std::vector<TensorSpec> ready = {spec("a", {100}), spec("big", {1000}), spec("c", {100})};
  const auto batches = plan_fusion(ready, 1000);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].items, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(batches[1].items, (std::vector<size_t>{1}));
  // Fusion off: one per batch, in order.
  const auto off = plan_fusion(ready, 0);
  ASSERT_EQ(off.size(), 3u);
  EXPECT_EQ(off[1].items, (std::vector<size_t>{1}));
}

TEST(Wire, RoundTripsEveryField) {
  TensorSpec a = spec("layer1.conv.weight", {64, 3, 7, 7}, DataType::kBFloat16);
  a.op = OpType::kReduceScatter;
  a.reduce_op = ReduceOp::kMax;
  a.root = 3;
  a.prescale = 0.25;
  a.postscale = 4;
  a.group = 17;
  a.group_size = 5;
  a.process_set = 2;
  a.refusal = "dtype bool is not accepted";
  a.order = {0, 2, 3, 1};  // channels-last
  const TensorSpec b = spec("", {});
  const std::string bytes = encode_specs({a, b});
  const auto back = decode_specs(bytes.data(), bytes.size());
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(spec_difference(back[0], a), "");
  EXPECT_EQ(back[0].process_set, 2);
  EXPECT_EQ(back[0].refusal, a.refusal);
  EXPECT_EQ(back[0].order, a.order);
  EXPECT_EQ(spec_difference(back[1], b), "");
  EXPECT_TRUE(decode_specs(encode_specs({}).data(), encode_specs({}).size()).empty());
}

TEST(Wire, CorruptMessagesAreRefusedWithTheOffset) {
  const std::string good = encode_specs({spec("w", {2, 3})});
  // Every truncation fails cleanly, never reads past the end.
  for (size_t cut = 0; cut < good.size(); ++cut) {
    EXPECT_THROW(decode_specs(good.data(), cut), InvalidArgument) << cut;
  }
  std::string bad = good;
  bad[0] = 9;  // version
  EXPECT_THROW(decode_specs(bad.data(), bad.size()), InvalidArgument);
  bad = good + "x";  // trailing byte
  try {
    decode_specs(bad.data(), bad.size());
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("trailing bytes"), std::string::npos) << e.what();
  }
  bad = good;
  bad[1 + 4 + 4 + 1] = 42;  // op after count and the 1-byte name "w"
  EXPECT_THROW(decode_specs(bad.data(), bad.size()), InvalidArgument);
  // A huge name length is refused before any allocation.
  bad = good;
  bad[5] = bad[6] = bad[7] = bad[8] = '\xff';
  EXPECT_THROW(decode_specs(bad.data(), bad.size()), InvalidArgument);
}

// A memory order must be a permutation of the shape's dimensions (or absent).
TEST(Wire, MemoryOrdersThatAreNoPermutationAreRefused) {
  for (const std::vector<uint8_t>& order :
       std::vector<std::vector<uint8_t>>{{0, 1}, {0, 0, 1}, {0, 1, 3}, {2, 1, 0}}) {
    TensorSpec s = spec("w", {2, 3, 4});
    s.order = order;
    const std::string bytes = encode_specs({s});
    const bool permutation = order == std::vector<uint8_t>{2, 1, 0};
    if (permutation) {
      EXPECT_EQ(decode_specs(bytes.data(), bytes.size())[0].order, order);
    } else {
      EXPECT_THROW(decode_specs(bytes.data(), bytes.size()), InvalidArgument);
    }
  }
}

TEST(TensorSpec, DifferentMemoryLayoutsDisagreeSayingBoth) {
  TensorSpec a = spec("g", {8, 3, 5, 5}), b = a;
  b.order = {0, 2, 3, 1};
  EXPECT_EQ(spec_difference(a, b), "memory layout row-major vs dims in memory order (0, 2, 3, 1)");
  a.order = b.order;
  EXPECT_EQ(spec_difference(a, b), "");
}

TEST(Coordinator, LastToArriveIsTheLatestCycleAndTheHighestRankOnATie) {
  EXPECT_EQ(last_to_arrive({}), -1);
  EXPECT_EQ(last_to_arrive({7}), 0);
  EXPECT_EQ(last_to_arrive({3, 9, 4}), 1);
  EXPECT_EQ(last_to_arrive({9, 2, 9, 1}), 2);
  EXPECT_EQ(last_to_arrive({5, 5, 5}), 2);
}

TEST(Coordinator, CompletesInFirstArrivalOrderWhateverTheRankOrder) {
  const auto t = Coordinator::Clock::now();
  // Three ranks send the same three names in different orders over two cycles.
  Coordinator a(3), b(3);
  const std::vector<std::vector<std::string>> orders = {
      {"x", "y", "z"}, {"z", "x", "y"}, {"y", "z", "x"}};
  for (Coordinator* c : {&a, &b}) {
    for (int r = 0; r < 3; ++r) {
      for (const std::string& n : orders[static_cast<size_t>(r)]) c->add(r, spec(n), 7, t);
    }
  }
  const auto da = a.take_complete();
  ASSERT_EQ(da.size(), 3u);
  EXPECT_EQ(da[0].name, "x");  // first arrival: rank 0 sent x first
  EXPECT_EQ(da[1].name, "y");
  EXPECT_EQ(da[2].name, "z");
  for (const auto& d : da) EXPECT_EQ(d.error, "");
  EXPECT_EQ(da[0].cycle_by_rank, (std::vector<uint64_t>{7, 7, 7}));
  const auto db = b.take_complete();
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(da[i].name, db[i].name);
  EXPECT_EQ(a.pending(), 0u);
  EXPECT_TRUE(a.take_complete().empty());
}

TEST(Coordinator, WaitsForEveryRankAndNamesTheSidesOfAMismatch) {
  const auto t = Coordinator::Clock::now();
  Coordinator c(4);
  c.add(0, spec("w", {8}), 1, t);
  c.add(2, spec("w", {8}), 1, t);
  c.add(1, spec("w", {8}, DataType::kFloat16), 2, t);
  EXPECT_TRUE(c.take_complete().empty());  // rank 3 has not sent it
  c.add(3, spec("w", {8}, DataType::kFloat16), 3, t);
  c.add(3, spec("w", {9}), 3, t);  // a second spec of a pending name is ignored
  const auto d = c.take_complete();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].error, "mismatch in collective 'w': dtype f32 vs f16 (ranks 0, 2 vs ranks 1, 3)");
  EXPECT_EQ(d[0].cycle_by_rank, (std::vector<uint64_t>{1, 2, 1, 3}));
}

TEST(Coordinator, StallsNameWhoIsMissingAndReportOnce) {
  const auto t0 = Coordinator::Clock::now();
  Coordinator c(3);
  c.add(1, spec("late"), 0, t0);
  EXPECT_TRUE(c.stalls(5.0, t0 + std::chrono::seconds(1)).empty());
  auto s = c.stalls(5.0, t0 + std::chrono::seconds(6));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_TRUE(s[0].first_report);
  EXPECT_EQ(s[0].present, (std::vector<int>{1}));
  EXPECT_EQ(s[0].missing, (std::vector<int>{0, 2}));
  EXPECT_EQ(s[0].report(),
            "stall: collective 'late' has waited 6 s; ranks 1 enqueued it, ranks 0, 2 have not");
  s = c.stalls(5.0, t0 + std::chrono::seconds(7));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_FALSE(s[0].first_report);
}

TEST(Coordinator, AStallNamesWhatTheMissingRanksWaitOnInstead) {
  // Two ranks whose automatic names diverged: each waits on its own name; each report says
  // what the missing rank waits on.
  const auto t0 = Coordinator::Clock::now();
  Coordinator c(2);
  c.add(0, spec("allgather.set0.noname.5"), 0, t0);
  c.add(1, spec("allgather.set0.noname.4"), 0, t0);
  const auto s = c.stalls(60.0, t0 + std::chrono::seconds(61));
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].report(),
            "stall: collective 'allgather.set0.noname.5' has waited 61 s; ranks 0 enqueued it, "
            "ranks 1 have not; rank 1 waits on 'allgather.set0.noname.4' instead");
  EXPECT_EQ(s[1].missing_waits_on,
            (std::vector<std::pair<int, std::string>>{{0, "allgather.set0.noname.5"}}));
}

TEST(Coordinator, ARefusalFailsTheNameOnEveryRankNamingTheRefusingRanks) {
  const auto t = Coordinator::Clock::now();
  Coordinator c(3);
  TensorSpec refused = spec("x");
  refused.refusal = "bool tensors are not accepted";
  c.add(0, spec("x"), 0, t);
  c.add(2, spec("x"), 0, t);
  EXPECT_TRUE(c.take_complete().empty());
  c.add(1, refused, 1, t);
  const auto d = c.take_complete();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].error,
            "collective 'x' failed: rank 1 refused its arguments (rank 1: bool tensors are not "
            "accepted); ranks 0, 2 enqueued it");
  // Every rank refusing (the same bad call everywhere) completes the name too, so nothing is
  // left to stall; and a refusal never equals a spec (no cache hit).
  for (int q = 0; q < 3; ++q) c.add(q, refused, 2, t);
  const auto all = c.take_complete();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].error.find("collective 'x' failed: ranks 0, 1, 2 refused their arguments"), 0u)
      << all[0].error;
  EXPECT_EQ(c.pending(), 0u);
  EXPECT_EQ(spec_difference(refused, spec("x")), "a rank refused its arguments");
  EXPECT_EQ(spec_difference(refused, refused), "");
}

}  // namespace
}  // namespace engine
}  // namespace tessera

namespace tessera {
namespace engine {
namespace {

TensorSpec join_spec() {
  TensorSpec s;
  s.name = kJoinName;
  s.op = OpType::kJoin;
  s.dtype = DataType::kInt32;
  s.shape = {0};
  return s;
}

TEST(Coordinator, AJoinedRankCountsAsPresentUntilEveryRankHasJoined) {
  const auto t = Coordinator::Clock::now();
  Coordinator c(3);
  c.add(1, join_spec(), 0, t);
  EXPECT_TRUE(c.joined(1));
  c.add(0, spec("g"), 0, t);
  EXPECT_TRUE(c.take_complete().empty());  // rank 2 has neither sent nor joined
  c.add(2, spec("g"), 1, t);
  auto d = c.take_complete();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].name, "g");
  EXPECT_EQ(d[0].joined, std::vector<int>{1});
  EXPECT_TRUE(d[0].error.empty()) << d[0].error;
  // Not an allreduce: an error naming the joined rank.
  TensorSpec bc = spec("b");
  bc.op = OpType::kBroadcast;
  c.add(0, bc, 2, t);
  c.add(2, bc, 2, t);
  d = c.take_complete();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].error,
            "collective 'b' (broadcast) ran while ranks 1 had joined: after join() only allreduce "
            "can run (a joined rank contributes the operation's identity, zeros for a sum or an "
            "average)");
  // Rank 0 joins with a tensor of rank 2 outstanding: both complete in one pass, rank 2's
  // tensor judged with both joined ranks, and the join state is cleared afterwards.
  c.add(2, spec("late"), 3, t);
  c.add(0, join_spec(), 3, t);
  EXPECT_TRUE(c.take_complete().size() == 1u);  // "late"; rank 2 has not joined yet
  c.add(2, spec("last"), 4, t);
  c.add(2, join_spec(), 4, t);
  d = c.take_complete();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].name, kJoinName);
  EXPECT_EQ(d[1].name, "last");
  EXPECT_EQ(d[1].joined, (std::vector<int>{0, 1}));
  for (int r = 0; r < 3; ++r) EXPECT_FALSE(c.joined(r));
  c.add(0, spec("next"), 5, t);
  EXPECT_TRUE(c.take_complete().empty());  // nobody is joined any more
}

TEST(IdleBackoff, DoublesWhileIdleUpToTheCapAndDropsOnWork) {
  // From the cycle time (1 ms) with a 16 ms back-off: 2, 4, 8, 16, 16, then work: 1.
  double w = 1;
  std::vector<double> seen;
  for (int i = 0; i < 5; ++i) seen.push_back(w = next_wait_ms(true, w, 1, 16));
  EXPECT_EQ(seen, (std::vector<double>{2, 4, 8, 16, 16}));
  EXPECT_EQ(next_wait_ms(false, 16, 1, 16), 1);
  // A cap that is not a power of two of the cycle time is reached exactly.
  EXPECT_EQ(next_wait_ms(true, 5, 5, 12), 10);
  EXPECT_EQ(next_wait_ms(true, 10, 5, 12), 12);
  // Cycle time 0 (wake on every enqueue) backs off from 1 ms.
  EXPECT_EQ(next_wait_ms(false, 8, 0, 8), 1);
  EXPECT_EQ(next_wait_ms(true, 1, 0, 8), 2);
  // The one rule both the start and set_tunables use.
  EXPECT_EQ(base_wait_ms(0), 1);
  EXPECT_EQ(base_wait_ms(0.25), 0.25);
  EXPECT_EQ(base_wait_ms(7), 7);
  // Every (idle, current, cycle time, cap) of a grid: never below the cycle time, never above
  // the larger of cap and cycle time, and the cycle time whenever there is work.
  for (double cycle : {0.0, 0.5, 1.0, 3.0, 10.0}) {
    const double base = cycle > 0 ? cycle : 1.0;
    for (double cap : {0.0, 1.0, 2.0, 8.0, 100.0}) {
      for (double current : {base, 2 * base, 7.0, 64.0, 200.0}) {
        EXPECT_EQ(next_wait_ms(false, current, cycle, cap), base);
        const double idle = next_wait_ms(true, current, cycle, cap);
        EXPECT_GE(idle, base);
        EXPECT_LE(idle, std::max(base, cap));
        if (cap <= base) {
          EXPECT_EQ(idle, base) << "no back-off at or below the cycle time";
        }
      }
    }
  }
}

TEST(FillIdentity, EveryOpAndDtypeLeavesTheOtherOperandUnchanged) {
  const std::vector<DataType> types = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                       DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
                                       DataType::kUInt8,    DataType::kInt8,    DataType::kInt16};
  const std::vector<ReduceOp> ops = {ReduceOp::kSum,     ReduceOp::kMin,    ReduceOp::kMax,
                                     ReduceOp::kProduct, ReduceOp::kBitAnd, ReduceOp::kBitOr};
  for (DataType dt : types) {
    for (ReduceOp op : ops) {
      if (is_floating(dt) && (op == ReduceOp::kBitAnd || op == ReduceOp::kBitOr)) continue;
      const size_t n = 5, es = dtype_size(dt);
      std::vector<unsigned char> x(n * es), id(n * es), out(n * es);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<unsigned char>(37 * i + 11);
      if (dt == DataType::kFloat16 || dt == DataType::kBFloat16) {
        for (size_t i = 0; i < n; ++i) x[2 * i + 1] &= 0x3f;  // finite values
      }
      if (dt == DataType::kFloat32 || dt == DataType::kFloat64) {
        for (size_t i = 0; i < n; ++i) x[(i + 1) * es - 1] = 0x3f;  // finite
      }
      fill_identity(dt, op, id.data(), n);
      reduce(dt, op, x.data(), id.data(), out.data(), n);
      EXPECT_EQ(x, out) << dtype_name(dt) << " " << reduce_op_name(op);
    }
  }
}

}  // namespace
}  // namespace engine
}  // namespace tessera
