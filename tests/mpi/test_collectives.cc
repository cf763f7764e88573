// allgather(v), broadcast, reduce-scatter, alltoall(v), barrier; the Communicator's node
// structure, split and dup; and deadlines: a rank that never joins is named, nothing hangs.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/collectives.h"
#include "comm/communicator.h"
#include "common/error.h"
#include "common/settings.h"
#include "mpi/mpi_test_util.h"

namespace tessera {
namespace comm {
namespace {

using testing::average_tolerance;
using testing::Buf;
using testing::hashed_small;
using testing::kAllDtypes;
using testing::largest_once;

const std::vector<size_t> kCounts = {0, 1, 7, 1023, 65537};

// A value that identifies (rank, index) and is exact in every dtype (< 256).
double tag(int r, size_t i) { return static_cast<double>((r * 37 + i * 11) % 251); }

class CollectivesTest : public testing::WorldTest {};

TEST_F(CollectivesTest, AllgatherInAndOutOfPlace) {
  const int n = world_->size(), r = world_->rank();
  for (DataType dt : kAllDtypes) {
    for (size_t count : kCounts) {
      Buf in(dt, count), out(dt, count * n);
      for (size_t i = 0; i < count; ++i) in.set(i, tag(r, i));
      allgather(*world_, in.data(), out.data(), count, dt);
      for (int q = 0; q < n; ++q) {
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(out.at(q * count + i), tag(q, i)) << dtype_name(dt) << " count " << count;
        }
      }
      Buf inplace(dt, count * n);
      for (size_t i = 0; i < count; ++i) inplace.set(r * count + i, tag(r, i));
      allgather(*world_, inplace.data() + r * count * dtype_size(dt), inplace.data(), count, dt);
      EXPECT_EQ(std::memcmp(inplace.data(), out.data(), count * n * dtype_size(dt)), 0);
    }
  }
}

TEST_F(CollectivesTest, AllgathervWithUnequalCounts) {
  const int n = world_->size(), r = world_->rank();
  std::vector<size_t> counts(n);
  size_t total = 0;
  for (int q = 0; q < n; ++q) total += counts[q] = static_cast<size_t>(q * 3 % 5);  // zeros too
  for (DataType dt : kAllDtypes) {
    Buf in(dt, counts[r]), out(dt, total);
    for (size_t i = 0; i < counts[r]; ++i) in.set(i, tag(r, i));
    allgatherv(*world_, in.data(), out.data(), counts, dt);
    size_t at = 0;
    for (int q = 0; q < n; ++q) {
      for (size_t i = 0; i < counts[q]; ++i) ASSERT_EQ(out.at(at++), tag(q, i)) << dtype_name(dt);
    }
  }
}

TEST_F(CollectivesTest, BroadcastFromEveryRoot) {
  const int n = world_->size(), r = world_->rank();
  for (DataType dt : kAllDtypes) {
    for (size_t count : kCounts) {
      for (int root = 0; root < n; ++root) {
        Buf b(dt, count);
        for (size_t i = 0; i < count; ++i) b.set(i, r == root ? tag(root, i) : 0);
        broadcast(*world_, b.data(), count, dt, root);
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(b.at(i), tag(root, i)) << dtype_name(dt);
      }
    }
  }
  float x = 0;
  EXPECT_THROW(broadcast(*world_, &x, 1, DataType::kFloat32, n), InvalidArgument);
}

TEST_F(CollectivesTest, ReduceScatterEveryOp) {
  const int n = world_->size(), r = world_->rank();
  const std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                                     ReduceOp::kMax};
  // 512-byte segments reach the multi-segment path at small blocks.
  Settings small_segments = world_->settings();
  small_segments.segment_bytes = 512;
  const std::unique_ptr<Communicator> comm = world_->dup(small_segments);
  for (size_t block : kCounts) {
    // Element j of rank q: a hashed small integer (no two offsets alike, so a block sent to the
    // wrong rank fails); sums stay below 256 for n <= 8. Computed once per block for every
    // dtype, with this rank's block of the exact sum, min and max over ranks.
    std::vector<double> mine(block * n), sum(block), low(block), high(block);
    for (size_t j = 0; j < block * n; ++j) mine[j] = hashed_small(5, r, j);
    for (size_t i = 0; i < block; ++i) {
      const size_t j = r * block + i;
      sum[i] = low[i] = high[i] = hashed_small(5, 0, j);
      for (int q = 1; q < n; ++q) {
        const double v = hashed_small(5, q, j);
        sum[i] += v;
        low[i] = std::min(low[i], v);
        high[i] = std::max(high[i], v);
      }
    }
    const bool once = largest_once() && block >= (size_t{1} << 20);
    for (DataType dt : kAllDtypes) {
      if (once && dt != DataType::kFloat32) continue;
      Buf in(dt, block * n), out(dt, block);
      for (size_t j = 0; j < block * n; ++j) in.set(j, mine[j]);
      for (ReduceOp op : ops) {
        if (op == ReduceOp::kAverage && !is_floating(dt)) continue;
        if (once && op != ReduceOp::kSum) continue;
        reduce_scatter(*comm, in.data(), out.data(), block, dt, op);
        for (size_t i = 0; i < block; ++i) {
          const double exact = op == ReduceOp::kSum       ? sum[i]
                               : op == ReduceOp::kAverage ? sum[i] / n
                               : op == ReduceOp::kMin     ? low[i]
                                                          : high[i];
          const double want = Buf::as(dt, exact);
          const double tol = op == ReduceOp::kAverage ? average_tolerance(dt, want) : 0;
          ASSERT_NEAR(out.at(i), want, tol)
              << dtype_name(dt) << " " << reduce_op_name(op) << " block " << block << " i " << i;
        }
      }
    }
  }
}

TEST_F(CollectivesTest, AlltoallAndAlltoallv) {
  const int n = world_->size(), r = world_->rank();
  for (DataType dt : kAllDtypes) {
    for (size_t block : kCounts) {
      Buf in(dt, block * n), out(dt, block * n);
      // Block j of rank r carries tag(r * n + j, i): rank j must find it in its block r.
      for (int j = 0; j < n; ++j) {
        for (size_t i = 0; i < block; ++i) in.set(j * block + i, tag(r * n + j, i));
      }
      alltoall(*world_, in.data(), out.data(), block, dt);
      for (int q = 0; q < n; ++q) {
        for (size_t i = 0; i < block; ++i) {
          ASSERT_EQ(out.at(q * block + i), tag(q * n + r, i)) << dtype_name(dt);
        }
      }
    }
    // alltoallv: rank r sends (r + j) % 3 elements to rank j.
    std::vector<size_t> sc(n), rc(n);
    size_t st = 0, rt = 0;
    for (int j = 0; j < n; ++j) {
      st += sc[j] = static_cast<size_t>((r + j) % 3);
      rt += rc[j] = static_cast<size_t>((j + r) % 3);
    }
    Buf in(dt, st), out(dt, rt);
    size_t at = 0;
    for (int j = 0; j < n; ++j) {
      for (size_t i = 0; i < sc[j]; ++i) in.set(at++, tag(r * n + j, i));
    }
    alltoallv(*world_, in.data(), sc, out.data(), rc, dt);
    at = 0;
    for (int q = 0; q < n; ++q) {
      for (size_t i = 0; i < rc[q]; ++i) ASSERT_EQ(out.at(at++), tag(q * n + r, i));
    }
  }
}

TEST_F(CollectivesTest, NodeStructure) {
  const int n = world_->size();
  const int per_node = world_->settings().ranks_per_node;
  ASSERT_NE(world_->local(), nullptr);
  ASSERT_NE(world_->cross(), nullptr);
  if (per_node > 0) {
    // All ranks of a test run share one machine: pretend nodes are consecutive groups.
    EXPECT_EQ(world_->node_index(), world_->rank() / per_node);
    EXPECT_EQ(world_->local_rank(), world_->rank() % per_node);
    EXPECT_EQ(world_->num_nodes(), (n + per_node - 1) / per_node);
    EXPECT_EQ(world_->uniform_nodes(), n % per_node == 0);
  } else {
    // One machine, or as many hosts as scripts/netns_hosts.sh made (it sets this), each with
    // the same number of ranks.
    const char* hosts = std::getenv("TESSERA_TEST_EXPECT_NODES");
    const int nodes = hosts ? std::atoi(hosts) : 1;
    EXPECT_EQ(world_->num_nodes(), nodes);
    EXPECT_EQ(world_->local_size(), n / nodes);
  }
  EXPECT_EQ(world_->cross()->rank(), world_->node_index());
  // The local communicator holds exactly the ranks of our node, in order.
  std::vector<int> node_of(n);
  int mine = world_->node_index();
  allgather(*world_, &mine, node_of.data(), 1, DataType::kInt32);
  int expected_local = 0;
  for (int q = 0; q < world_->rank(); ++q) expected_local += node_of[q] == mine;
  EXPECT_EQ(world_->local()->rank(), expected_local);
}

TEST_F(CollectivesTest, SplitAndDupAreIndependent) {
  const int n = world_->size(), r = world_->rank();
  auto halves = world_->split(r % 2, r);
  ASSERT_NE(halves, nullptr);
  EXPECT_EQ(halves->size(), (n + 1 - r % 2) / 2);
  EXPECT_EQ(halves->rank(), r / 2);
  int one = 1, sum = 0;
  allreduce(*halves, &one, &sum, 1, DataType::kInt32);
  EXPECT_EQ(sum, halves->size());
  auto none = world_->split(r == 0 ? -1 : 0, r);
  EXPECT_EQ(none == nullptr, r == 0);

  // Two threads, each with its own duplicate, run collectives at the same time: their
  // messages never match each other's.
  auto a = world_->dup();
  auto b = world_->dup();
  auto work = [&](Communicator* c, int salt, bool* ok) {
    *ok = true;
    for (int iter = 0; iter < 50; ++iter) {
      std::vector<int64_t> v(1000 + iter * 37, salt + iter), out(v.size());
      AllreduceOptions opts;
      opts.algorithm = iter % 2 ? Algorithm::kRing : Algorithm::kRhd;
      allreduce(*c, v.data(), out.data(), v.size(), DataType::kInt64, opts);
      for (int64_t x : out) *ok = *ok && x == static_cast<int64_t>(salt + iter) * n;
    }
  };
  bool ok_a = false, ok_b = false;
  std::thread ta(work, a.get(), 1000, &ok_a);
  std::thread tb(work, b.get(), 7, &ok_b);
  ta.join();
  tb.join();
  EXPECT_TRUE(ok_a);
  EXPECT_TRUE(ok_b);
}

TEST_F(CollectivesTest, AMissingRankIsNamedNotAHang) {
  const int n = world_->size();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  // The abandoned collectives run on communicators with a short deadline; world_ keeps its own.
  Settings short_deadline = world_->settings();
  short_deadline.timeout_s = 1.5;
  for (Algorithm a :
       {Algorithm::kRing, Algorithm::kRhd, Algorithm::kDbtree, Algorithm::kHierarchical}) {
    if (a == Algorithm::kHierarchical && !world_->uniform_nodes()) continue;
    // A throw-away communicator: the abandoned collective leaves messages behind in it.
    auto scratch = world_->dup(short_deadline);
    const int missing = n - 1;
    int threw = 0;
    if (world_->rank() != missing) {
      float x[16] = {};
      AllreduceOptions opts;
      opts.algorithm = a;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        allreduce(*scratch, x, x, 16, DataType::kFloat32, opts);
        // Ranks that need nothing from the missing one may finish (dbtree leaves do not).
      } catch (const TimeoutError& e) {
        threw = 1;
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_LT(s, 10.0) << algorithm_name(a);
        const std::string what = e.what();
        EXPECT_NE(what.find("rank"), std::string::npos) << what;
        // In the ring, rank 0 receives from the missing rank: it names it.
        if (a == Algorithm::kRing && world_->rank() == 0) {
          EXPECT_NE(what.find("world rank " + std::to_string(missing)), std::string::npos) << what;
        }
      }
    }
    // On world_'s long deadline the missing rank now waits for the others' timeouts.
    int threw_total = 0;
    allreduce(*world_, &threw, &threw_total, 1, DataType::kInt32);
    EXPECT_GE(threw_total, 1) << algorithm_name(a) << ": nobody noticed the missing rank";
    barrier(*world_);
  }
}

// Two communicators over the same ranks in one process, each with its own settings: the
// algorithm ranges, segment size and colors each one's collectives use, and the deadline.
TEST_F(CollectivesTest, EachCommunicatorUsesItsOwnSettings) {
  const int n = world_->size();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  Settings a_settings = world_->settings();
  a_settings.set_allreduce("rhd");
  a_settings.segment_bytes = 1024;
  a_settings.timeout_s = 1.0;
  Settings b_settings = world_->settings();
  b_settings.set_allreduce("ring:0-4095;multicolor:4096-max");
  b_settings.colors = 3;
  auto a = world_->dup(a_settings);
  auto b = world_->dup(b_settings);
  EXPECT_EQ(a->settings().segment_bytes, 1024u);
  EXPECT_EQ(b->settings().segment_bytes, world_->settings().segment_bytes);
  EXPECT_EQ(b->settings().colors, 3);
  EXPECT_EQ(choose_allreduce(*a, 64, Algorithm::kAuto), Algorithm::kRhd);
  EXPECT_EQ(choose_allreduce(*a, 1 << 20, Algorithm::kAuto), Algorithm::kRhd);
  EXPECT_EQ(choose_allreduce(*b, 64, Algorithm::kAuto), Algorithm::kRing);
  EXPECT_EQ(choose_allreduce(*b, 1 << 20, Algorithm::kAuto), Algorithm::kMulticolor);
  // The node groups follow their parent's settings.
  EXPECT_EQ(a->local()->settings().timeout_s, 1.0);
  // Interleaved, each gives the exact sum through its own algorithm.
  for (size_t count : {size_t{5}, size_t{3000}, size_t{100003}}) {
    std::vector<int64_t> in(count), out_a(count), out_b(count);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<int64_t>(i) * (world_->rank() + 1);
    allreduce(*a, in.data(), out_a.data(), count, DataType::kInt64);
    allreduce(*b, in.data(), out_b.data(), count, DataType::kInt64);
    const int64_t factor = static_cast<int64_t>(n) * (n + 1) / 2;
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(out_a[i], static_cast<int64_t>(i) * factor) << "count " << count;
      ASSERT_EQ(out_b[i], static_cast<int64_t>(i) * factor) << "count " << count;
    }
  }
  // a's one-second deadline: the last rank stays away, the others time out on a within seconds,
  // then everyone meets on b, whose deadline is the world's.
  int threw = 0;
  if (world_->rank() != n - 1) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      barrier(*a);
    } catch (const TimeoutError&) {
      threw = 1;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(threw, 1) << "a barrier with a rank missing returned";
    EXPECT_LT(s, 10.0) << "a's deadline is 1 s";
  }
  int threw_total = 0;
  allreduce(*b, &threw, &threw_total, 1, DataType::kInt32);
  EXPECT_EQ(threw_total, n - 1);
}

// comm::init agrees on the settings: a value that differs between ranks, a rank's own problem
// with its sources, or a bad value all ranks share, is the same InvalidArgument on every rank
// (none is left waiting for one that threw), naming the setting and the ranks.
TEST_F(CollectivesTest, SettingsThatDifferBetweenRanksFailOnEveryRank) {
  const int n = world_->size(), r = world_->rank();
  auto error_of = [](const ResolvedSettings& mine) {
    try {
      init(nullptr, nullptr, mine);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  if (n >= 2) {
    ResolvedSettings differ;
    differ.values = {{"TESSERA_COLORS", r == 1 ? "3" : "2"}};
    const std::string why = error_of(differ);
    EXPECT_NE(why.find("TESSERA_COLORS differs between ranks"), std::string::npos) << why;
    EXPECT_NE(why.find("'3' on rank 1"), std::string::npos) << why;
    std::string others = n == 2 ? "'2' on rank 0" : "'2' on ranks 0";
    for (int q = 2; q < n; ++q) others += ", " + std::to_string(q);
    EXPECT_NE(why.find(others), std::string::npos) << why;
  }
  ResolvedSettings one_rank_bad;
  if (r == n - 1) one_rank_bad.error = "unknown config file key TESSERA_X";
  const std::string why = error_of(one_rank_bad);
  EXPECT_NE(why.find("rank " + std::to_string(n - 1) + ": unknown config file key TESSERA_X"),
            std::string::npos)
      << why;
  ResolvedSettings out_of_range;
  out_of_range.values = {{"TESSERA_COLORS", "99"}};
  const std::string range = error_of(out_of_range);
  EXPECT_NE(range.find("TESSERA_COLORS='99' is not accepted: out of range; accepted: an integer "
                       "from 1 to 16"),
            std::string::npos)
      << range;
  // None of these replaced the settings init agreed on: a new world communicator has them.
  EXPECT_EQ(Communicator::world()->settings().colors, world_->settings().colors);
  barrier(*world_);
}

TEST_F(CollectivesTest, BarrierAndZeroCounts) {
  barrier(*world_);
  allgather(*world_, nullptr, nullptr, 0, DataType::kFloat32);
  broadcast(*world_, nullptr, 0, DataType::kFloat32, 0);
  reduce_scatter(*world_, nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum);
  alltoall(*world_, nullptr, nullptr, 0, DataType::kFloat32);
  EXPECT_THROW(allgather(*world_, nullptr, nullptr, 3, DataType::kFloat32), InvalidArgument);
}

}  // namespace
}  // namespace comm
}  // namespace tessera
