// Every allreduce algorithm x dtype x op x count against closed-form expected values, in place
// and out of place, at whatever rank count mpirun gave us (CTest runs 1, 2, 3, 4, 5 and 8, and
// pretend-node splits through TESSERA_RANKS_PER_NODE).
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
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

const std::vector<ReduceOp> kOps = {ReduceOp::kSum,  ReduceOp::kAverage, ReduceOp::kMin,
                                    ReduceOp::kMax,  ReduceOp::kProduct, ReduceOp::kBitAnd,
                                    ReduceOp::kBitOr};
const std::vector<size_t> kCounts = {0, 1, 7, 1023, 65537, (size_t{1} << 20) + 3};

// Rank r's element i for op: exact small integers from a hash of (r, i), so no two offsets of
// a buffer hold the same values (see hashed_small). Sums over 8 ranks stay below 256 (u8, and
// exact in bf16); products stay below 64 (at most 6 ranks contribute a 2).
double value(ReduceOp op, int r, size_t i) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return hashed_small(1, r, i);
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return hashed_small(2, r, i);
    case ReduceOp::kProduct:
      return r < 6 && hashed_small(3, r, i) % 4 == 0 ? 2 : 1;
    case ReduceOp::kBitAnd:
    case ReduceOp::kBitOr:
      // AND and OR over ranks differ from every input: each rank sets its own bit.
      return static_cast<double>(hashed_small(4, r, i) * 8 | (1u << (r % 8)));
  }
  return 0;
}

// The reduction over ranks 0..n-1 of value(op, r, i), computed here in exact arithmetic: the
// sum for kAverage (divided where it is checked). Cached per (op, n, count): the matrix checks
// each many times over, for every algorithm and dtype.
const std::vector<double>& expected_all(ReduceOp op, int n, size_t count) {
  static std::map<std::tuple<int, int, size_t>, std::vector<double>> cache;
  std::vector<double>& e = cache[{static_cast<int>(op), n, count}];
  if (e.size() == count) return e;
  e.assign(count, 0);
  for (size_t i = 0; i < count; ++i) {
    double acc = value(op, 0, i);
    unsigned bits = static_cast<unsigned>(acc);
    for (int r = 1; r < n; ++r) {
      const double v = value(op, r, i);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAverage:
          acc += v;
          break;
        case ReduceOp::kMin:
          acc = std::min(acc, v);
          break;
        case ReduceOp::kMax:
          acc = std::max(acc, v);
          break;
        case ReduceOp::kProduct:
          acc *= v;
          break;
        case ReduceOp::kBitAnd:
          bits &= static_cast<unsigned>(v);
          break;
        case ReduceOp::kBitOr:
          bits |= static_cast<unsigned>(v);
          break;
      }
    }
    const bool bitwise = op == ReduceOp::kBitAnd || op == ReduceOp::kBitOr;
    e[i] = bitwise ? static_cast<double>(bits) : acc;
  }
  return e;
}

// Number of wrong elements; reports the first one. Every op is exact in every dtype except the
// average's division (average_tolerance).
size_t check(const Buf& out, size_t count, ReduceOp op, int n, const std::string& what) {
  const std::vector<double>& all = expected_all(op, n, count);
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    const double want = Buf::as(out.dtype, op == ReduceOp::kAverage ? all[i] / n : all[i]);
    const double got = out.at(i);
    const double tol = op == ReduceOp::kAverage ? average_tolerance(out.dtype, want) : 0.0;
    if (!(std::fabs(got - want) <= tol)) {
      if (wrong == 0) {
        ADD_FAILURE() << what << ": element " << i << " is " << got << ", expected " << want;
      }
      ++wrong;
    }
  }
  return wrong;
}

class AllreduceTest : public testing::WorldTest {};

void run_matrix(Communicator& world, Algorithm algorithm) {
  // Small segments and shared-memory pieces below 1 MiB reach the multi-segment and
  // multi-piece paths; the largest count runs with the defaults.
  Settings small_settings = world.settings();
  small_settings.segment_bytes = 1024;
  small_settings.shm_bytes = 16 << 10;
  const std::unique_ptr<Communicator> small = world.dup(small_settings);
  const int n = world.size();
  const int r = world.rank();
  for (size_t count : kCounts) {
    Communicator& comm = count < (size_t{1} << 20) ? *small : world;
    AllreduceOptions opts;
    opts.algorithm = algorithm;
    for (DataType dt : kAllDtypes) {
      for (ReduceOp op : kOps) {
        if (op == ReduceOp::kAverage && !is_floating(dt)) continue;
        const bool bitwise = op == ReduceOp::kBitAnd || op == ReduceOp::kBitOr;
        if (bitwise && is_floating(dt)) continue;
        // Bitwise ops share the integer data path; the small counts already reach its multi-
        // segment and multi-piece paths, and checking 2^20 elements per op is most of the time.
        if (bitwise && count >= (size_t{1} << 20)) continue;
        // The sanitizer builds (scripts/sanitize.sh) run the largest count once per algorithm,
        // f32 sum: the same default-segment code, at a tenth of the time under ASan and TSan.
        if (largest_once() && count >= (size_t{1} << 20) &&
            (dt != DataType::kFloat32 || op != ReduceOp::kSum)) {
          continue;
        }
        opts.op = op;
        Buf in(dt, count), out(dt, count);
        for (size_t i = 0; i < count; ++i) in.set(i, value(op, r, i));
        const std::string what = std::string(algorithm_name(algorithm)) + " " + dtype_name(dt) +
                                 " " + reduce_op_name(op) + " count " + std::to_string(count) +
                                 " ranks " + std::to_string(n);
        allreduce(comm, in.data(), out.data(), count, dt, opts);
        EXPECT_EQ(check(out, count, op, n, what + " out of place"), 0u);
        // The input is untouched out of place.
        for (size_t i = 0; i < std::min<size_t>(count, 64); ++i) {
          ASSERT_EQ(in.at(i), Buf::as(dt, value(op, r, i))) << what << ": input changed at " << i;
        }
        // In place, on the largest count only for f32 (it is the same code path).
        if (count < (size_t{1} << 20) || dt == DataType::kFloat32) {
          allreduce(comm, in.data(), in.data(), count, dt, opts);
          EXPECT_EQ(check(in, count, op, n, what + " in place"), 0u);
        }
      }
    }
  }
}

TEST_F(AllreduceTest, Ring) { run_matrix(*world_, Algorithm::kRing); }
TEST_F(AllreduceTest, Rhd) { run_matrix(*world_, Algorithm::kRhd); }
TEST_F(AllreduceTest, Dbtree) { run_matrix(*world_, Algorithm::kDbtree); }
TEST_F(AllreduceTest, Multicolor) { run_matrix(*world_, Algorithm::kMulticolor); }
TEST_F(AllreduceTest, Mpi) { run_matrix(*world_, Algorithm::kMpi); }
TEST_F(AllreduceTest, Auto) { run_matrix(*world_, Algorithm::kAuto); }
TEST_F(AllreduceTest, Hierarchical) {
  if (!world_->uniform_nodes()) {
    // Unequal nodes: refused with a message that says so, on every rank, before any message.
    float x = 1;
    AllreduceOptions opts;
    opts.algorithm = Algorithm::kHierarchical;
    EXPECT_THROW(allreduce(*world_, &x, &x, 1, DataType::kFloat32, opts), InvalidArgument);
    return;
  }
  run_matrix(*world_, Algorithm::kHierarchical);
}

// The node split is the hosts': ranks share a node exactly when they share a host name, with
// nodes numbered by their first rank. Under scripts/netns_hosts.sh the hosts are network
// namespaces with their own names, and TESSERA_TEST_EXPECT_NODES says how many there must be,
// so a launcher that put every rank on one host cannot pass unnoticed.
TEST_F(AllreduceTest, NodeSplitFollowsTheHosts) {
  if (world_->settings().ranks_per_node > 0)
    GTEST_SKIP() << "pretend nodes (TESSERA_RANKS_PER_NODE)";
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  std::vector<char> all(256 * static_cast<size_t>(world_->size()));
  ASSERT_EQ(MPI_Allgather(name, 256, MPI_CHAR, all.data(), 256, MPI_CHAR, MPI_COMM_WORLD),
            MPI_SUCCESS);
  std::vector<std::string> hosts, first_seen;
  for (int r = 0; r < world_->size(); ++r) hosts.emplace_back(&all[256 * static_cast<size_t>(r)]);
  for (const std::string& h : hosts) {
    if (std::find(first_seen.begin(), first_seen.end(), h) == first_seen.end()) {
      first_seen.push_back(h);
    }
  }
  const std::string& mine = hosts[static_cast<size_t>(world_->rank())];
  EXPECT_EQ(world_->num_nodes(), static_cast<int>(first_seen.size()));
  EXPECT_EQ(world_->node_index(),
            std::find(first_seen.begin(), first_seen.end(), mine) - first_seen.begin());
  EXPECT_EQ(world_->local_size(), std::count(hosts.begin(), hosts.end(), mine));
  if (const char* expect = std::getenv("TESSERA_TEST_EXPECT_NODES")) {
    EXPECT_EQ(world_->num_nodes(), std::atoi(expect)) << "host " << mine;
  }
}

TEST_F(AllreduceTest, MulticolorWithEveryColorCount) {
  for (int colors = 1; colors <= 6; ++colors) {
    AllreduceOptions opts;
    opts.algorithm = Algorithm::kMulticolor;
    Settings settings = world_->settings();
    settings.colors = colors;
    settings.segment_bytes = 1024;
    const std::unique_ptr<Communicator> comm = world_->dup(settings);
    const size_t count = 10007;
    Buf in(DataType::kFloat32, count), out(DataType::kFloat32, count);
    for (size_t i = 0; i < count; ++i) in.set(i, value(ReduceOp::kSum, world_->rank(), i));
    allreduce(*comm, in.data(), out.data(), count, DataType::kFloat32, opts);
    EXPECT_EQ(check(out, count, ReduceOp::kSum, world_->size(),
                    "multicolor colors " + std::to_string(colors)),
              0u);
  }
}

// Non-integer inputs whose sum depends on the order of additions: every rank must still end
// with the same bits, the same run twice must give the same bits, and every element must be
// within the rounding bound of its sum computed here in f64 (so a misplaced chunk, which every
// rank would agree on, still fails).
TEST_F(AllreduceTest, EveryRankHoldsTheSameBitsAndRunsRepeat) {
  const size_t count = 300001;
  for (Algorithm a : all_algorithms()) {
    if (!world_->uniform_nodes() && a == Algorithm::kHierarchical) continue;
    std::vector<float> in(count), out1(count), out2(count);
    auto input = [](int rank, size_t i) {
      return std::sin(static_cast<float>(i) * 0.37f + static_cast<float>(rank)) * 1e3f;
    };
    for (size_t i = 0; i < count; ++i) in[i] = input(world_->rank(), i);
    AllreduceOptions opts;
    opts.algorithm = a;
    Settings settings = world_->settings();
    settings.segment_bytes = 8192;
    const std::unique_ptr<Communicator> comm = world_->dup(settings);
    allreduce(*comm, in.data(), out1.data(), count, DataType::kFloat32, opts);
    allreduce(*comm, in.data(), out2.data(), count, DataType::kFloat32, opts);
    EXPECT_EQ(std::memcmp(out1.data(), out2.data(), count * 4), 0) << algorithm_name(a);
    // n - 1 additions in f32, each off by at most 2^-24 of a partial sum <= sum |x|.
    const int n = world_->size();
    size_t far = 0;
    for (size_t i = 0; i < count; ++i) {
      double exact = 0, magnitude = 0;
      for (int q = 0; q < n; ++q) {
        exact += input(q, i);
        magnitude += std::fabs(input(q, i));
      }
      if (!(std::fabs(out1[i] - exact) <= n * std::ldexp(magnitude, -24))) {
        if (far++ == 0) {
          ADD_FAILURE() << algorithm_name(a) << ": element " << i << " is " << out1[i]
                        << ", the f64 sum is " << exact;
        }
      }
    }
    EXPECT_EQ(far, 0u) << algorithm_name(a);
    // Gather every rank's result and compare bits with rank 0's.
    std::vector<float> all(count * static_cast<size_t>(world_->size()));
    allgather(*world_, out1.data(), all.data(), count, DataType::kFloat32);
    for (int q = 1; q < world_->size(); ++q) {
      EXPECT_EQ(std::memcmp(all.data(), all.data() + count * static_cast<size_t>(q), count * 4), 0)
          << algorithm_name(a) << ": rank " << q << " differs from rank 0";
    }
  }
}

TEST_F(AllreduceTest, BadArgumentsAreRefusedBeforeAnyMessage) {
  float x = 0;
  EXPECT_THROW(allreduce(*world_, nullptr, &x, 1, DataType::kFloat32), InvalidArgument);
  EXPECT_THROW(allreduce(*world_, &x, nullptr, 1, DataType::kFloat32), InvalidArgument);
  int32_t i = 0;
  AllreduceOptions avg;
  avg.op = ReduceOp::kAverage;
  try {
    allreduce(*world_, &i, &i, 1, DataType::kInt32, avg);
    ADD_FAILURE() << "average on i32 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("average is not defined on integer dtype i32"),
              std::string::npos)
        << e.what();
  }
  AllreduceOptions band;
  band.op = ReduceOp::kBitAnd;
  EXPECT_THROW(allreduce(*world_, &x, &x, 1, DataType::kFloat32, band), InvalidArgument);
  EXPECT_THROW(allreduce(*world_, &x, &x, ~size_t{0} / 2, DataType::kFloat32), InvalidArgument);
  // Null buffers with count 0 are fine, and do nothing.
  allreduce(*world_, nullptr, nullptr, 0, DataType::kFloat32);
}

TEST_F(AllreduceTest, OverrideSettingPicksTheAlgorithmBySize) {
  Settings settings = world_->settings();
  settings.set_allreduce("rhd:0-1023;ring:1024-max");
  const std::unique_ptr<Communicator> comm = world_->dup(settings);
  EXPECT_EQ(choose_allreduce(*comm, 8, Algorithm::kAuto), Algorithm::kRhd);
  EXPECT_EQ(choose_allreduce(*comm, 1024, Algorithm::kAuto), Algorithm::kRing);
  // An explicit request beats the setting.
  EXPECT_EQ(choose_allreduce(*comm, 8, Algorithm::kMpi), Algorithm::kMpi);
  try {
    settings.set_allreduce("ring:0-10;bogus:11-max");
    ADD_FAILURE() << "a malformed TESSERA_ALLREDUCE was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'bogus:11-max'"), std::string::npos) << e.what();
  }
  // A rejected text leaves the settings as they were.
  EXPECT_EQ(settings.allreduce, "rhd:0-1023;ring:1024-max");
}

}  // namespace
}  // namespace comm
}  // namespace tessera
