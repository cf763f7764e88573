// The engine under mpirun: negotiation in any order, the response cache, fusion, groups,
// mismatches named on every rank, the stall inspector, shutdown, bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/collectives.h"
#include "common/error.h"
#include "engine/engine.h"
#include "engine/idle_backoff.h"
#include "mpi/mpi_test_util.h"

namespace tessera {
namespace engine {
namespace {

using testing::WorldTest;

class EngineTest : public WorldTest {
 protected:
  EngineOptions fast() const {
    EngineOptions o = options_for(world_->settings());
    o.tunables.cycle_time_ms = 1;
    o.stall_check_s = 60;
    return o;
  }
};

std::string what_of(const Handle& h) {
  try {
    h.wait(30);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Waits, with a deadline, until this rank's engine has run `cycles` cycles: a count of events,
// where a sleep of a fixed time would mean something else on a machine 4x slower.
void wait_for_cycles(const Engine& engine, uint64_t cycles) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (engine.stats().cycles < cycles) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the engine stopped cycling";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// While every rank is idle the cycles back off to TESSERA_IDLE_BACKOFF apart (an idle engine
// must not take the cores from training threads), and work after a quiet spell brings them back
// to the cycle time. Checked on the cycle log (each cycle's vote and the wait it chose) against
// next_wait_ms, by counting cycles rather than timing them.
TEST_F(EngineTest, IdleCyclesBackOffAndWakeForWork) {
  EngineOptions o = fast();
  o.idle_backoff_ms = 16;
  Engine engine(*world_, o);
  float x = 1, y = 0;
  engine.enqueue_allreduce("warm", &x, &y, DataType::kFloat32, {1}, ReduceOp::kSum).wait(30);
  wait_for_cycles(engine, engine.stats().cycles + 8);  // enough idle ones to reach the cap
  engine.enqueue_allreduce("after.idle", &x, &y, DataType::kFloat32, {1}, ReduceOp::kSum).wait(30);
  EXPECT_EQ(y, static_cast<float>(world_->size()));
  for (int i = 0; i < 20; ++i) {
    engine.enqueue_allreduce("burst", &x, &y, DataType::kFloat32, {1}, ReduceOp::kSum).wait(30);
  }
  const std::vector<Engine::CycleTime> log = engine.cycle_log();
  ASSERT_GE(log.size(), 30u);
  int longest_idle_run = 0, run = 0, busy = 0;
  double longest_wait = 0;
  for (size_t k = 1; k < log.size(); ++k) {
    EXPECT_EQ(log[k].wait_ms, next_wait_ms(log[k].idle, log[k - 1].wait_ms, 1, 16))
        << "cycle " << log[k].index << (log[k].idle ? " (idle)" : " (busy)");
    run = log[k].idle ? run + 1 : 0;
    longest_idle_run = std::max(longest_idle_run, run);
    longest_wait = std::max(longest_wait, log[k].wait_ms);
    busy += !log[k].idle;
  }
  EXPECT_GE(longest_idle_run, 5) << "the wait for 8 cycles saw too few idle ones";
  EXPECT_EQ(longest_wait, 16) << "idle cycles back off to the cap and no further";
  EXPECT_GE(busy, 21) << "each of the 21 collectives after the quiet spell had a busy cycle";
}

// Every rank enqueues the same 200 tensors in its own random order; all complete with the
// right sums, and the second step goes through the response cache.
TEST_F(EngineTest, TwoHundredTensorsInDifferentOrdersTwice) {
  Engine engine(*world_, fast());
  const int n = world_->size(), r = world_->rank();
  const int kTensors = 200;
  std::vector<std::vector<float>> in(kTensors), out(kTensors);
  for (int t = 0; t < kTensors; ++t) {
    const size_t len = static_cast<size_t>(1 + (t * 37) % 3000);
    in[t].assign(len, 0);
    out[t].assign(len, -1);
    for (size_t i = 0; i < len; ++i) in[t][i] = static_cast<float>((r + 1) * ((t + i) % 5 + 1));
  }
  Engine::Stats after_first;
  for (int step = 0; step < 2; ++step) {
    if (step == 1) after_first = engine.stats();
    std::vector<int> order(kTensors);
    for (int t = 0; t < kTensors; ++t) order[t] = t;
    std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(r * 101 + step)));
    std::vector<Handle> handles(kTensors);
    for (int t : order) {
      handles[t] = engine.enqueue_allreduce("grad." + std::to_string(t), in[t].data(),
                                            out[t].data(), DataType::kFloat32,
                                            {static_cast<int64_t>(in[t].size())}, ReduceOp::kSum);
    }
    for (int t = 0; t < kTensors; ++t) {
      handles[t].wait(60);
      for (size_t i = 0; i < in[t].size(); ++i) {
        ASSERT_EQ(out[t][i], static_cast<float>(n * (n + 1) / 2 * ((t + i) % 5 + 1)))
            << "tensor " << t << " step " << step;
      }
    }
  }
  const Engine::Stats s = engine.stats();
  // The steady state: every tensor of the second step passed by its cache bit, and no cycle
  // of it needed the coordinator.
  EXPECT_EQ(s.cache_hits - after_first.cache_hits, static_cast<uint64_t>(kTensors));
  EXPECT_EQ(s.coordinator_rounds, after_first.coordinator_rounds);
  EXPECT_EQ(s.tensors_done, 2u * kTensors);
}

// set_tunables switches every rank to rank 0's settings at one point, even while tensors are in
// flight on both sides of it: results stay exact, every rank ends with the same settings, and the
// settings act (cache off: every tensor goes through the coordinator; an algorithm range: the
// timeline would name it, and a bad range is refused on every rank before anything is sent).
TEST_F(EngineTest, SetTunablesSwitchesEveryRankAtOnePointWhileTensorsFlow) {
  Engine engine(*world_, fast());
  const int n = world_->size(), r = world_->rank();
  const int kTensors = 40;
  std::vector<std::vector<float>> in(kTensors), out(kTensors);
  for (int t = 0; t < kTensors; ++t) {
    in[t].assign(static_cast<size_t>(1 + (t * 131) % 5000), static_cast<float>(r + 1 + t));
  }
  std::vector<Tunables> settings(4);
  settings[0].cycle_time_ms = 0;
  settings[0].fusion_threshold = 4096;
  settings[0].cache_enabled = false;
  settings[0].allreduce = "ring";
  settings[0].segment_bytes = 1024;
  settings[1].cycle_time_ms = 2;
  settings[1].fusion_threshold = 1 << 20;
  settings[1].allreduce = "multicolor";
  settings[1].colors = 3;
  settings[2].allreduce = "dbtree:0-16K;rhd:16385-max";
  settings[2].cache_enabled = false;
  settings[3] = Tunables{};
  for (size_t round = 0; round < settings.size(); ++round) {
    std::vector<Handle> handles(kTensors);
    // Half the tensors are enqueued before the switch and half after, in a rank-dependent order.
    for (int t = 0; t < kTensors / 2; ++t) {
      out[t].assign(in[t].size(), -1);
      handles[t] = engine.enqueue_allreduce("t" + std::to_string(t), in[t].data(), out[t].data(),
                                            DataType::kFloat32,
                                            {static_cast<int64_t>(in[t].size())}, ReduceOp::kSum);
    }
    Tunables mine = settings[round];
    if (r != 0) mine.fusion_threshold = 7777 + static_cast<size_t>(r);  // rank 0's wins
    const uint64_t rounds_before = engine.stats().coordinator_rounds;
    engine.set_tunables(mine);
    EXPECT_EQ(engine.tunables(), settings[round]) << "round " << round;
    for (int t = kTensors / 2; t < kTensors; ++t) {
      out[t].assign(in[t].size(), -1);
      handles[t] = engine.enqueue_allreduce("t" + std::to_string(t), in[t].data(), out[t].data(),
                                            DataType::kFloat32,
                                            {static_cast<int64_t>(in[t].size())}, ReduceOp::kSum);
    }
    for (int t = 0; t < kTensors; ++t) {
      handles[t].wait(60);
      const float want = static_cast<float>(n * (n + 1) / 2 + n * t);
      for (float v : out[t]) ASSERT_EQ(v, want) << "tensor " << t << " round " << round;
    }
    if (!settings[round].cache_enabled) {
      // Every tensor after the switch needed a coordinator round: with the cache on the second
      // half of round 1 onwards passes by bits alone.
      EXPECT_GT(engine.stats().coordinator_rounds, rounds_before) << "round " << round;
    }
  }
  // The same settings everywhere: the fusion threshold rank 0 chose, on every rank.
  int64_t lo = static_cast<int64_t>(engine.tunables().fusion_threshold), hi = lo;
  comm::AllreduceOptions mn, mx;
  mn.op = ReduceOp::kMin;
  mx.op = ReduceOp::kMax;
  comm::allreduce(*world_, &lo, &lo, 1, DataType::kInt64, mn);
  comm::allreduce(*world_, &hi, &hi, 1, DataType::kInt64, mx);
  EXPECT_EQ(lo, hi);
  Tunables bad;
  bad.allreduce = "ring:0-1K;ring:512-max";
  try {
    engine.set_tunables(bad);
    ADD_FAILURE() << "an overlapping range was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("overlaps"), std::string::npos) << e.what();
  }
  // Still usable after the refusal.
  float x = 1, y = 0;
  engine.enqueue_allreduce("after", &x, &y, DataType::kFloat32, {1}, ReduceOp::kSum).wait(30);
  EXPECT_EQ(y, static_cast<float>(n));
}

// Rank 0 waits on "x" under cache bit 0 while a new tensor evicts x and takes bit 0; rank 1
// then votes bit 0 for that other tensor. Rank 0's x must not vote bit 0 any more (the round
// that evicted x took it to the coordinator), or the ranks would agree on different tensors.
TEST_F(EngineTest, AnEvictedBitIsNotVotedForByTheRequestThatWaitedOnIt) {
  const int n = world_->size(), r = world_->rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  EngineOptions o = fast();
  o.cache_capacity = 1;
  Engine engine(*world_, o);
  std::vector<float> x(8, 1), y(8, 2), ox(8), oy(8);
  auto sum = ReduceOp::kSum;
  engine.enqueue_allreduce("x", x.data(), ox.data(), DataType::kFloat32, {8}, sum).wait(30);
  Handle hx;
  if (r == 0) hx = engine.enqueue_allreduce("x", x.data(), ox.data(), DataType::kFloat32, {8}, sum);
  // y goes through the coordinator and evicts x (capacity 1): y now holds bit 0.
  engine.enqueue_allreduce("y", y.data(), oy.data(), DataType::kFloat32, {8}, sum).wait(30);
  Handle hy;
  if (r != 0) hy = engine.enqueue_allreduce("y", y.data(), oy.data(), DataType::kFloat32, {8}, sum);
  // Give rank 0's stale x many chances to vote bit 0: 30 cycles, counted (cycles run in
  // lockstep, so every rank's count is the same).
  wait_for_cycles(engine, engine.stats().cycles + 30);
  comm::barrier(*world_);
  if (r == 0) {
    hy = engine.enqueue_allreduce("y", y.data(), oy.data(), DataType::kFloat32, {8}, sum);
  } else {
    hx = engine.enqueue_allreduce("x", x.data(), ox.data(), DataType::kFloat32, {8}, sum);
  }
  hx.wait(30);
  hy.wait(30);
  EXPECT_EQ(ox[7], static_cast<float>(n));
  EXPECT_EQ(oy[7], static_cast<float>(2 * n));
}

// The cycle log the bench reads: consecutive indices from 0, each cycle's negotiation ending
// after it starts and before the next one starts.
TEST_F(EngineTest, TheCycleLogIsConsecutiveAndSharedByEveryRank) {
  Engine engine(*world_, fast());
  std::vector<float> x(64, 1), y(64);
  for (int i = 0; i < 5; ++i) {
    engine.enqueue_allreduce("t" + std::to_string(i), x.data(), y.data(), DataType::kFloat32, {64})
        .wait(30);
  }
  const std::vector<Engine::CycleTime> log = engine.cycle_log();
  ASSERT_GE(log.size(), 5u);
  for (size_t i = 0; i < log.size(); ++i) {
    EXPECT_LE(log[i].start_s, log[i].negotiated_s) << "cycle " << log[i].index;
    if (i > 0) {
      EXPECT_EQ(log[i].index, log[i - 1].index + 1);
      EXPECT_LE(log[i - 1].negotiated_s, log[i].start_s);
    }
  }
  EXPECT_EQ(log.front().index, 0u);
  int64_t last = static_cast<int64_t>(log.back().index), lowest = last;
  comm::AllreduceOptions mn;
  mn.op = ReduceOp::kMin;
  comm::allreduce(*world_, &lowest, &lowest, 1, DataType::kInt64, mn);
  EXPECT_GE(lowest, 4) << "five collectives need at least five cycles on every rank";
}

TEST_F(EngineTest, AverageAndScaleFactorsAreFoldedIn) {
  EngineOptions o = fast();
  Engine engine(*world_, o);
  const int n = world_->size(), r = world_->rank();
  std::vector<double> a(1000, r + 1.0), b(7, 2.0 * (r + 1)), oa(1000), ob(7);
  auto ha = engine.enqueue_allreduce("avg.a", a.data(), oa.data(), DataType::kFloat64, {1000},
                                     ReduceOp::kAverage, 2.0, 0.5);
  auto hb = engine.enqueue_allreduce("avg.b", b.data(), ob.data(), DataType::kFloat64, {7},
                                     ReduceOp::kAverage, 2.0, 0.5);
  ha.wait(30);
  hb.wait(30);
  EXPECT_DOUBLE_EQ(oa[999], (n + 1) / 2.0);  // 2 * mean(r + 1) * 0.5
  EXPECT_DOUBLE_EQ(ob[0], 2.0 * (n + 1) / 2.0);
}

TEST_F(EngineTest, EveryKindOfMismatchFailsOnEveryRankNamingTheRanks) {
  const int n = world_->size(), r = world_->rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  Engine engine(*world_, fast());
  const bool odd = r == n - 1;
  std::vector<float> x(8, 1), y(8);
  std::vector<double> xd(8, 1), yd(8);
  struct Case {
    std::string name, expect;
    std::function<Handle()> enqueue;
  };
  const std::vector<Case> cases = {
      {"dtype", "dtype f32 vs f64",
       [&] {
         return odd ? engine.enqueue_allreduce("m.dtype", xd.data(), yd.data(), DataType::kFloat64,
                                               {8})
                    : engine.enqueue_allreduce("m.dtype", x.data(), y.data(), DataType::kFloat32,
                                               {8});
       }},
      {"shape", "shape [8] vs [4]",
       [&] {
         return engine.enqueue_allreduce("m.shape", x.data(), y.data(), DataType::kFloat32,
                                         {odd ? 4 : 8});
       }},
      {"reduce op", "reduce op sum vs max",
       [&] {
         return engine.enqueue_allreduce("m.op", x.data(), y.data(), DataType::kFloat32, {8},
                                         odd ? ReduceOp::kMax : ReduceOp::kSum);
       }},
      {"collective", "op allreduce vs broadcast",
       [&] {
         return odd ? engine.enqueue_broadcast("m.kind", x.data(), DataType::kFloat32, {8}, 0)
                    : engine.enqueue_allreduce("m.kind", x.data(), y.data(), DataType::kFloat32,
                                               {8});
       }},
      {"root", "root 0 vs 1",
       [&] {
         return engine.enqueue_broadcast("m.root", x.data(), DataType::kFloat32, {8}, odd ? 1 : 0);
       }},
      {"scale", "scale factors",
       [&] {
         return engine.enqueue_allreduce("m.scale", x.data(), y.data(), DataType::kFloat32, {8},
                                         ReduceOp::kSum, odd ? 2.0 : 1.0);
       }},
  };
  for (const Case& c : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string what = what_of(c.enqueue());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 5.0) << c.name;
    EXPECT_NE(what.find("mismatch in collective 'm."), std::string::npos) << c.name << ": " << what;
    EXPECT_NE(what.find(c.expect), std::string::npos) << c.name << ": " << what;
    EXPECT_NE(what.find("vs ranks " + std::to_string(n - 1) + ")"), std::string::npos)
        << c.name << ": " << what;
  }
  // The engine still works after the errors.
  auto h = engine.enqueue_allreduce("after", x.data(), y.data(), DataType::kFloat32, {8},
                                    ReduceOp::kSum);
  h.wait(30);
  EXPECT_EQ(y[0], static_cast<float>(n));
}

// Rank 0 waits on a cached tensor while every rank negotiates a new one, whose round takes
// rank 0's request to the coordinator. The others, enqueuing it later from their cache, must
// still meet it there at once, not after the stall timeout.
TEST_F(EngineTest, ACachedRequestTakenToTheCoordinatorStillMeetsTheOthers) {
  const int n = world_->size(), r = world_->rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  Engine engine(*world_, fast());
  std::vector<float> a(8, 1), b(8, 2), oa(8), ob(8);
  const ReduceOp sum = ReduceOp::kSum;
  engine.enqueue_allreduce("a", a.data(), oa.data(), DataType::kFloat32, {8}, sum).wait(30);
  // Rank 0 waits on the cached a while everyone negotiates the new b.
  Handle ha;
  if (r == 0) ha = engine.enqueue_allreduce("a", a.data(), oa.data(), DataType::kFloat32, {8}, sum);
  engine.enqueue_allreduce("b", b.data(), ob.data(), DataType::kFloat32, {8}, sum).wait(30);
  EXPECT_EQ(ob[7], static_cast<float>(2 * n));
  comm::barrier(*world_);
  // Now the others enqueue a from their cache; nothing else is new.
  const auto t0 = std::chrono::steady_clock::now();
  if (r != 0) ha = engine.enqueue_allreduce("a", a.data(), oa.data(), DataType::kFloat32, {8}, sum);
  ha.wait(30);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_EQ(oa[7], static_cast<float>(n));
}

// A tensor cached on every rank changes shape on one rank only: the changed rank invalidates
// the entry everywhere, so the others' cached requests meet it in the coordinator and every
// rank fails it naming the shapes, within seconds.
TEST_F(EngineTest, AShapeChangeOnOneRankOfACachedTensorIsAMismatchEverywhere) {
  const int n = world_->size(), r = world_->rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  Engine engine(*world_, fast());
  std::vector<float> x(16, 1), y(16);
  engine.enqueue_allreduce("x", x.data(), y.data(), DataType::kFloat32, {8}).wait(30);
  const int64_t len = r == 0 ? 16 : 8;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string what =
      what_of(engine.enqueue_allreduce("x", x.data(), y.data(), DataType::kFloat32, {len}));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_NE(what.find("mismatch in collective 'x'"), std::string::npos) << what;
  EXPECT_NE(what.find("shape"), std::string::npos) << what;
  // The engine goes on: x with one shape everywhere completes.
  engine.enqueue_allreduce("x", x.data(), y.data(), DataType::kFloat32, {8}, ReduceOp::kSum)
      .wait(30);
  EXPECT_EQ(y[7], static_cast<float>(n));
}

TEST_F(EngineTest, AShapeChangeInvalidatesTheCacheAndStillCompletes) {
  Engine engine(*world_, fast());
  const int n = world_->size();
  for (int len : {16, 16, 32, 32, 16}) {
    std::vector<float> x(static_cast<size_t>(len), 1), y(static_cast<size_t>(len));
    engine
        .enqueue_allreduce("changing", x.data(), y.data(), DataType::kFloat32, {len},
                           ReduceOp::kSum)
        .wait(30);
    EXPECT_EQ(y[static_cast<size_t>(len) - 1], static_cast<float>(n)) << len;
  }
}

TEST_F(EngineTest, GroupsCompleteTogetherWhateverTheOrder) {
  Engine engine(*world_, fast());
  const int n = world_->size(), r = world_->rank();
  std::vector<std::vector<float>> in(3, std::vector<float>(100, 1.0f)),
      out(3, std::vector<float>(100));
  std::vector<Request> reqs(3);
  for (int i = 0; i < 3; ++i) {
    reqs[i].spec.name = "group." + std::to_string(i);
    reqs[i].spec.shape = {100};
    reqs[i].spec.reduce_op = ReduceOp::kSum;
    reqs[i].input = in[i].data();
    reqs[i].output = out[i].data();
  }
  // Ranks list the members in different orders: the group is the same.
  if (r % 2) std::reverse(reqs.begin(), reqs.end());
  auto handles = engine.enqueue_group(reqs);
  for (Handle& h : handles) h.wait(30);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i][99], static_cast<float>(n));
}

TEST_F(EngineTest, OtherCollectives) {
  Engine engine(*world_, fast());
  const int n = world_->size(), r = world_->rank();
  // allgather with a different first dimension per rank.
  std::vector<int32_t> mine(static_cast<size_t>(r + 1) * 2, r);
  auto hg = engine.enqueue_allgather("ag", mine.data(), DataType::kInt32, {r + 1, 2});
  std::vector<float> b(5, r == 0 ? 7.0f : 0.0f);
  auto hb = engine.enqueue_broadcast("bc", b.data(), DataType::kFloat32, {5}, 0);
  std::vector<float> rs_in(static_cast<size_t>(n) * 3, 1.0f), rs_out(3);
  auto hr = engine.enqueue_reduce_scatter("rs", rs_in.data(), rs_out.data(), DataType::kFloat32,
                                          {n * 3}, ReduceOp::kSum);
  std::vector<int64_t> a_in(static_cast<size_t>(n)), a_out(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) a_in[static_cast<size_t>(j)] = r * 100 + j;
  auto ha = engine.enqueue_alltoall("a2a", a_in.data(), a_out.data(), DataType::kInt64, {n});
  hg.wait(30);
  hb.wait(30);
  hr.wait(30);
  ha.wait(30);
  EXPECT_EQ(hg.result_shape(), (std::vector<int64_t>{n * (n + 1) / 2, 2}));
  const int32_t* g = reinterpret_cast<const int32_t*>(hg.result().data());
  size_t at = 0;
  for (int q = 0; q < n; ++q) {
    for (int k = 0; k < (q + 1) * 2; ++k) ASSERT_EQ(g[at++], q);
  }
  EXPECT_EQ(b[4], 7.0f);
  EXPECT_EQ(rs_out[2], static_cast<float>(n));
  for (int j = 0; j < n; ++j) EXPECT_EQ(a_out[static_cast<size_t>(j)], j * 100 + r);
}

TEST_F(EngineTest, TheStallInspectorNamesTheMissingRanks) {
  const int n = world_->size(), r = world_->rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  EngineOptions o = fast();
  o.stall_check_s = 0.3;
  o.stall_shutdown_s = 1.0;
  Engine engine(*world_, o);
  float x = 1, y = 0;
  // Enqueued everywhere but on the last rank: after 1 s every pending handle fails on every
  // rank with the report, which names the last rank as missing.
  Handle h;
  if (r != n - 1) h = engine.enqueue_allreduce("lonely", &x, &y, DataType::kFloat32, {1});
  float z = 1, w = 0;
  Handle other = engine.enqueue_allreduce("elsewhere", &z, &w, DataType::kFloat32, {1});
  other.wait(30);  // unaffected by the stall until the shutdown
  if (r != n - 1) {
    const std::string what = what_of(h);
    EXPECT_NE(what.find("stall: collective 'lonely'"), std::string::npos) << what;
    EXPECT_NE(what.find("ranks " + std::to_string(n - 1) + " have not"), std::string::npos) << what;
  }
  // Every rank's engine shuts down in the same cycle.
  const auto t0 = std::chrono::steady_clock::now();
  while (!engine.is_shut_down() &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(engine.is_shut_down());
}

TEST_F(EngineTest, ShutdownFailsPendingWorkWithTheReasonAndRank) {
  const int n = world_->size(), r = world_->rank();
  Engine engine(*world_, fast());
  float x = 1, y = 0;
  Handle h =
      engine.enqueue_allreduce("never." + std::to_string(r), &x, &y, DataType::kFloat32, {1});
  comm::barrier(*world_);
  if (r == 0) engine.shutdown("the test is over");
  const std::string what = what_of(h);
  if (n > 1) {
    EXPECT_NE(what.find("shut down because the test is over (rank 0)"), std::string::npos) << what;
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (!engine.is_shut_down() &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  try {
    engine.enqueue_allreduce("late", &x, &y, DataType::kFloat32, {1});
    ADD_FAILURE() << "enqueue after shutdown was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("shut down"), std::string::npos) << e.what();
  }
}

// A rank that ran fewer steps (it skipped one, or had less data, without join) finishes while
// the others wait on its last collectives: their error names those tensors and the ranks that
// did and did not enqueue them, not only "shut down".
TEST_F(EngineTest, ARankThatFinishesEarlyLeavesAnErrorNamingWhatItNeverEnqueued) {
  const int n = world_->size(), r = world_->rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  Engine engine(*world_, fast());
  float x = 1, y = 0;
  engine.enqueue_allreduce("step0.grad", &x, &y, DataType::kFloat32, {1}).wait(30);
  // "ready" is enqueued after step1.grad on the other ranks, so once it completes the
  // coordinator holds every other rank's step1.grad request: the shutdown cannot overtake one
  // (across hosts it did: rank 0's own request had not been read when the shutdown came).
  float z = 1, w = 0;
  if (r == n - 1) {
    engine.enqueue_allreduce("ready", &z, &w, DataType::kFloat32, {1}).wait(30);
    engine.shutdown("rank " + std::to_string(r) + " finished its steps");
  } else {
    Handle h = engine.enqueue_allreduce("step1.grad", &x, &y, DataType::kFloat32, {1});
    engine.enqueue_allreduce("ready", &z, &w, DataType::kFloat32, {1}).wait(30);
    const std::string what = what_of(h);
    std::string others;
    for (int q = 0; q + 1 < n; ++q) others += (q ? ", " : "") + std::to_string(q);
    EXPECT_NE(what.find("finished its steps (rank " + std::to_string(n - 1) + ")"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("left incomplete: 'step1.grad' (enqueued by rank" +
                        std::string(n > 2 ? "s " : " ") + others + ", not by rank " +
                        std::to_string(n - 1) + ")"),
              std::string::npos)
        << what;
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (!engine.is_shut_down() &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(engine.is_shut_down());
}

TEST_F(EngineTest, BadInputIsRefusedAtTheCall) {
  Engine engine(*world_, fast());
  float x[4] = {1, 1, 1, 1}, y[4];
  EXPECT_THROW(engine.enqueue_allreduce("", x, y, DataType::kFloat32, {4}), InvalidArgument);
  EXPECT_THROW(engine.enqueue_allreduce("null", nullptr, y, DataType::kFloat32, {4}),
               InvalidArgument);
  EXPECT_THROW(engine.enqueue_allreduce("neg", x, y, DataType::kFloat32, {-4}), InvalidArgument);
  // Adasum combines floating-point tensors only (integer averages are Horovod's: below).
  int32_t i[4] = {5, -5, 3, 1};
  EXPECT_THROW(engine.enqueue_allreduce("iada", i, i, DataType::kInt32, {4}, ReduceOp::kAdasum),
               InvalidArgument);
  // A NaN scale would differ from itself in every comparison (found by fuzz_wire).
  EXPECT_THROW(
      engine.enqueue_allreduce("nan", x, y, DataType::kFloat32, {4}, ReduceOp::kSum, std::nan("")),
      InvalidArgument);
  EXPECT_THROW(engine.enqueue_allreduce(kJoinName, x, y, DataType::kFloat32, {4}), InvalidArgument);
  // Other tensors are unaffected by the refusals.
  float a = 1, b = 0;
  engine.enqueue_allreduce("fine", &a, &b, DataType::kFloat32, {1}, ReduceOp::kSum).wait(30);
  EXPECT_EQ(b, static_cast<float>(world_->size()));
  // An integer average: the sum scaled by 1/n in double and truncated toward zero (Horovod).
  int32_t avg[4];
  const int n = world_->size();
  engine.enqueue_allreduce("iavg", i, avg, DataType::kInt32, {4}, ReduceOp::kAverage).wait(30);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(avg[k], static_cast<int32_t>(static_cast<double>(i[k] * n) * (1.0 / n))) << k;
  }
  if (world_->size() == 1) return;  // alone, a tensor completes at once: nothing stays in flight
  // A name only this rank uses never completes, so the second enqueue is surely in flight.
  const std::string dup = "dup." + std::to_string(world_->rank());
  Handle h = engine.enqueue_allreduce(dup, x, y, DataType::kFloat32, {4}, ReduceOp::kSum);
  try {
    engine.enqueue_allreduce(dup, x, y, DataType::kFloat32, {4}, ReduceOp::kSum);
    ADD_FAILURE() << "a duplicate name in flight was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("still in flight"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(h.poll());
}

TEST_F(EngineTest, TimelineIsValidJsonWhileRunningAndHoldsTheEvents) {
  const int r = world_->rank();
  Engine engine(*world_, fast());
  const std::string path = "/tmp/tessera_timeline_test." + std::to_string(r) + ".json";
  engine.start_timeline(path);
  auto parse = [&] {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return nlohmann::json::parse(ss.str());  // throws if the file is not valid JSON
  };
  EXPECT_TRUE(parse().is_array());
  std::vector<float> a(100, 1), b(50, 1), oa(100), ob(50);
  auto h1 = engine.enqueue_allreduce("tl.a", a.data(), oa.data(), DataType::kFloat32, {100});
  auto h2 = engine.enqueue_allreduce("tl.b", b.data(), ob.data(), DataType::kFloat32, {50});
  h1.wait(30);
  h2.wait(30);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  float c = 1, oc = 0;
  engine.enqueue_allreduce("tl.c", &c, &oc, DataType::kFloat32, {1}).wait(30);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  engine.enqueue_allreduce("tl.d", &c, &oc, DataType::kFloat32, {1}).wait(30);
  // Still running: the file parses, and the first tensors' events are in it.
  const nlohmann::json mid = parse();
  engine.stop_timeline();
  const nlohmann::json all = parse();
  EXPECT_GE(all.size(), mid.size());
  std::set<std::string> names;
  bool algorithm_named = false, rows_named = false;
  for (const auto& e : all) {
    names.insert(e.at("name").get<std::string>());
    if (e.at("name") == "ALLREDUCE" && e.at("args").contains("algorithm")) algorithm_named = true;
    if (e.at("ph") == "M" && e.at("args").at("name") == "tl.a") rows_named = true;
  }
  for (const char* n : {"NEGOTIATE", "QUEUE", "ALLREDUCE"}) {
    EXPECT_TRUE(names.count(n)) << n << " missing from the timeline";
  }
  EXPECT_TRUE(algorithm_named);
  EXPECT_TRUE(rows_named);
  std::remove(path.c_str());
}

TEST_F(EngineTest, ProcessSetsReduceAmongTheirMembersIndependently) {
  const int n = world_->size(), r = world_->rank();
  Engine engine(*world_, fast());
  std::vector<int> evens, odds, all;
  for (int q = 0; q < n; ++q) {
    (q % 2 ? odds : evens).push_back(q);
    all.push_back(q);
  }
  const int even_set = engine.add_process_set(evens);
  const int odd_set = odds.empty() ? -1 : engine.add_process_set(odds);
  const int all_set = engine.add_process_set(all);
  // Sums among the members only.
  {
    Request req;
    req.spec.name = "parity.sum";
    req.spec.shape = {3};
    req.spec.reduce_op = ReduceOp::kSum;
    req.spec.process_set = r % 2 ? odd_set : even_set;
    std::vector<float> x(3, static_cast<float>(r + 1)), y(3);
    req.input = x.data();
    req.output = y.data();
    engine.enqueue(req).wait(30);
    float want = 0;
    for (int q : (r % 2 ? odds : evens)) want += static_cast<float>(q + 1);
    EXPECT_EQ(y[2], want);
  }
  // Not a member: refused at the call.
  if (n > 1) {
    Request req;
    req.spec.name = "foreign";
    req.spec.shape = {1};
    req.spec.process_set = r % 2 ? even_set : odd_set;
    float x = 0, y = 0;
    req.input = &x;
    req.output = &y;
    EXPECT_THROW(engine.enqueue(req), InvalidArgument);
  }
  // A tensor stalled in set 0 (rank 0 holds it back) does not hold back set `all_set`.
  float a = 1, b = 0;
  Handle held;
  if (r != 0)
    held = engine.enqueue_allreduce("held", &a, &b, DataType::kFloat32, {1}, ReduceOp::kSum);
  {
    Request req;
    req.spec.name = "free";
    req.spec.shape = {1};
    req.spec.reduce_op = ReduceOp::kSum;
    req.spec.process_set = all_set;
    float x = 1, y = 0;
    req.input = &x;
    req.output = &y;
    engine.enqueue(req).wait(30);
    EXPECT_EQ(y, static_cast<float>(n));
  }
  if (r == 0)
    held = engine.enqueue_allreduce("held", &a, &b, DataType::kFloat32, {1}, ReduceOp::kSum);
  held.wait(30);
  EXPECT_EQ(b, static_cast<float>(n));
  // Different lists on different ranks are refused everywhere.
  if (n > 1) {
    std::vector<int> mine = {0, r == 0 ? 1 : n - 1};
    if (n == 2) mine = {r};
    EXPECT_THROW(engine.add_process_set(mine), InvalidArgument);
  }
}

}  // namespace
}  // namespace engine
}  // namespace tessera
