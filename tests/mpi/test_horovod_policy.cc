// Horovod's policy in the C++ front end (issue 31): automatic names per kind and process set,
// a rank that refuses its arguments failing every rank's op within a cycle, the engine going
// on after every kind of failure, integer averages and scale factors as Horovod's, and the
// broadcast root as a rank of the whole job. tests/python/test_policy.py checks the same rules
// through the Python front end.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "mpi/torch_test_util.h"
#include "tessera/torch.h"

namespace tessera {
namespace {

using testing::TorchTest;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One unnamed op of every kind, checked against its closed form: what must work after a
// failure. Every rank calls it in the same order.
void every_kind_works(int n, int r) {
  const torch::Tensor one = torch::ones({n, 2});
  EXPECT_TRUE(torch::equal(allreduce(one, "", ReduceOp::kSum), one * n));
  EXPECT_EQ(allgather(torch::full({1}, r)).sum().item<int64_t>(), n * (n - 1) / 2);
  EXPECT_TRUE(torch::equal(broadcast(torch::full({3}, r), 0), torch::zeros({3}, torch::kLong)));
  const torch::Tensor a2a = alltoall(torch::full({n}, r, torch::kInt));
  EXPECT_TRUE(torch::equal(a2a, torch::arange(n).to(torch::kInt)));
  TensorHandle rs = reducescatter_async(one, "", ReduceOp::kSum);
  EXPECT_TRUE(torch::equal(synchronize(rs), torch::full({1, 2}, static_cast<float>(n))));
  std::vector<torch::Tensor> g = grouped_allreduce({one, one * 2}, "", ReduceOp::kSum);
  EXPECT_TRUE(torch::equal(g[1], one * 2 * n));
}

// Runs `call` on every rank, expects InvalidArgument on every rank within 5 s whose message
// holds each of `fragments`, then checks that every kind of op still works.
template <class Call>
void fails_everywhere_then_works(Call call, std::vector<std::string> fragments, int n, int r) {
  const auto t0 = Clock::now();
  try {
    call();
    ADD_FAILURE() << "expected an error naming " << fragments.front();
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const std::string& f : fragments) EXPECT_NE(m.find(f), std::string::npos) << m;
  }
  EXPECT_LT(seconds_since(t0), 5.0);
  every_kind_works(n, r);
}

TEST_F(TorchTest, AutomaticNamesAreCountedPerKindAndProcessSet) {
  if (n() < 2) GTEST_SKIP() << "needs 2 ranks";
  // A set without the last rank: its unnamed ops are not counted there, so a world op after
  // them has the same automatic name on every rank (it was "allreduce.noname.N" per kind only).
  std::vector<int> first;
  for (int q = 0; q + 1 < n(); ++q) first.push_back(q);
  const int set = add_process_set(first);
  if (in_process_set(set)) {
    EXPECT_EQ(allreduce(torch::ones({2}), "", ReduceOp::kSum, 1.0, 1.0, set).sum().item<float>(),
              2.0f * (n() - 1));
  }
  TensorHandle h = allreduce_async(torch::ones({2}), "", ReduceOp::kSum);
  EXPECT_EQ(h.name().rfind("allreduce.set0.noname.", 0), 0u) << h.name();
  EXPECT_TRUE(torch::equal(synchronize(h), torch::full({2}, static_cast<float>(n()))));
  remove_process_set(set);
}

TEST_F(TorchTest, ARankRefusingItsArgumentsFailsEveryRankAndTheEngineGoesOn) {
  if (n() < 2) GTEST_SKIP() << "needs 2 ranks";
  // The last rank passes a complex tensor (refused locally: the accepted dtypes are named
  // there); the others enqueue. Nobody waits for the stall time.
  const int last = n() - 1;
  auto call = [&] {
    const torch::Tensor t = r() == last ? torch::ones({2}, torch::kComplexFloat) : torch::ones({2});
    allreduce(t, "", ReduceOp::kSum);
  };
  std::vector<std::string> fragments = {"allreduce.set0.noname."};
  if (r() != last) fragments.push_back("rank " + std::to_string(last) + " refused");
  fails_everywhere_then_works(call, fragments, n(), r());
}

TEST_F(TorchTest, EveryKindOfMismatchLeavesTheEngineWorking) {
  if (n() < 2) GTEST_SKIP() << "needs 2 ranks";
  const bool zero = r() == 0;
  fails_everywhere_then_works([&] { allreduce(torch::ones({zero ? 3 : 4})); }, {"shape"}, n(), r());
  fails_everywhere_then_works(
      [&] { allreduce(torch::ones({2}, zero ? torch::kFloat : torch::kDouble)); }, {"dtype"}, n(),
      r());
  fails_everywhere_then_works(
      [&] { allreduce(torch::ones({2}), "", zero ? ReduceOp::kSum : ReduceOp::kMax); },
      {"reduce op"}, n(), r());
  fails_everywhere_then_works([&] { broadcast(torch::ones({2}), zero ? 0 : 1); }, {"root"}, n(),
                              r());
  // A root outside the world: refused where it is passed, an error everywhere.
  fails_everywhere_then_works([&] { broadcast(torch::ones({2}), zero ? n() : 0); }, {"broadcast"},
                              n(), r());
}

TEST_F(TorchTest, ADuplicateNameInFlightIsRefusedAndTheFirstCompletes) {
  torch::Tensor a = torch::ones({2});
  TensorHandle first = allreduce_async(a, "dup", ReduceOp::kSum);
  // Only fails when the first is still in flight; on one rank it may be done already.
  try {
    TensorHandle second = allreduce_async(a, "dup", ReduceOp::kSum);
    synchronize(second);
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("still in flight"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(torch::equal(synchronize(first), a * n()));
  every_kind_works(n(), r());
}

TEST_F(TorchTest, IntegerAverageAndScaleFactorsAreHorovods) {
  // Horovod on the CPU: the sum scaled in double, truncated toward zero.
  const torch::Tensor x = torch::tensor({5, -5, 7, 1}, torch::kInt) * (r() + 1);
  const int64_t k = n() * (n() + 1) / 2;  // the sum over ranks of (r + 1)
  auto trunc = [](double v) { return static_cast<int64_t>(v); };
  for (torch::ScalarType t : {torch::kInt, torch::kLong}) {
    const torch::Tensor avg = allreduce(x.to(t));
    const torch::Tensor scaled = allreduce(x.to(t), "", ReduceOp::kSum, 0.5, 3.0);
    const std::vector<int64_t> base = {5, -5, 7, 1};
    for (size_t i = 0; i < base.size(); ++i) {
      EXPECT_EQ(avg[static_cast<int64_t>(i)].item<int64_t>(),
                trunc(static_cast<double>(base[i] * k) * (1.0 / n())));
      int64_t sum = 0;
      for (int q = 1; q <= n(); ++q) sum += trunc(0.5 * static_cast<double>(base[i] * q));
      EXPECT_EQ(scaled[static_cast<int64_t>(i)].item<int64_t>(),
                trunc(3.0 * static_cast<double>(sum)));
    }
  }
  // Reduce-scatter likewise (2 rows per rank).
  const torch::Tensor rows = torch::full({2 * n(), 1}, 3 * (r() + 1), torch::kLong);
  TensorHandle h = reducescatter_async(rows, "", ReduceOp::kAverage);
  EXPECT_TRUE(torch::equal(synchronize(h),
                           torch::full({2, 1}, trunc(3.0 * k * (1.0 / n())), torch::kLong)));
}

TEST_F(TorchTest, BroadcastRootIsARankOfTheWholeJobOnAProcessSet) {
  if (n() < 2) GTEST_SKIP() << "needs 2 ranks";
  // The set {1, ..., n-1}: its root 1 is the set's rank 0.
  std::vector<int> rest;
  for (int q = 1; q < n(); ++q) rest.push_back(q);
  const int set = add_process_set(rest);
  if (in_process_set(set)) {
    const torch::Tensor got = broadcast(torch::full({2}, r()), 1, "", set);
    EXPECT_TRUE(torch::equal(got, torch::full({2}, 1, torch::kLong)));
    EXPECT_EQ(process_set_ranks(set), rest);
    // Rank 0 of the job is no member: refused on every member, naming the set's ranks.
    try {
      broadcast(torch::full({2}, r()), 0, "", set);
      ADD_FAILURE() << "a root outside the set was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("not in process set"), std::string::npos) << e.what();
    }
  }
  remove_process_set(set);
}

TEST_F(TorchTest, UnevenAlltoallAndReducescatterAsHorovods) {
  // Rank i sends i + 2j + 1 rows (values 100 i + j) to rank j: what a rank sends and what it
  // receives differ, so mixing up the directions shows.
  std::vector<int64_t> splits;
  std::vector<torch::Tensor> parts;
  for (int j = 0; j < n(); ++j) {
    splits.push_back(r() + 2 * j + 1);
    parts.push_back(torch::full({splits.back(), 2}, 100 * r() + j, torch::kLong));
  }
  TensorHandle h = alltoall_async(torch::cat(parts), "", 0, splits);
  const torch::Tensor out = synchronize(h);
  std::vector<int64_t> want_splits;
  std::vector<torch::Tensor> want;
  for (int i = 0; i < n(); ++i) {
    want_splits.push_back(i + 2 * r() + 1);
    want.push_back(torch::full({want_splits.back(), 2}, 100 * i + r(), torch::kLong));
  }
  EXPECT_EQ(h.received_splits(), want_splits);
  EXPECT_TRUE(torch::equal(out, torch::cat(want)));
  // Reduce-scatter of 2n + 1 rows: rank q gets rows / n rows, the first rows % n one more.
  const int64_t rows = 2 * n() + 1;
  const torch::Tensor x = torch::arange(rows).reshape({rows, 1}) * (r() + 1);
  TensorHandle rs = reducescatter_async(x, "", ReduceOp::kSum);
  int64_t start = 0;
  for (int q = 0; q < r(); ++q) start += rows / n() + (q < rows % n() ? 1 : 0);
  const int64_t mine = rows / n() + (r() < rows % n() ? 1 : 0);
  EXPECT_TRUE(torch::equal(synchronize(rs), torch::arange(start, start + mine).reshape({mine, 1}) *
                                                (n() * (n() + 1) / 2)));
  if (n() < 2) return;
  // Bad splits on the last rank: every rank raises, naming it, and nothing waits.
  const bool last = r() == n() - 1;
  std::vector<int64_t> bad(static_cast<size_t>(n()), 1);
  if (last) bad[0] = 7;
  std::vector<std::string> fragments = {"splits"};
  if (!last) fragments = {"rank(s) " + std::to_string(n() - 1), "refused"};
  fails_everywhere_then_works([&] { alltoall_async(torch::ones({n()}), "", 0, bad); }, fragments,
                              n(), r());
}

// Adasum's reference in double: neighbours first (step d pairs r and r + d), as the core and
// Horovod pair them; a coefficient stays 1 where its vector's squared norm is below 1e-8.
std::vector<double> adasum_reference(std::vector<std::vector<double>> v) {
  for (size_t d = 1; d < v.size(); d <<= 1) {
    for (size_t r = 0; r + d < v.size(); r += 2 * d) {
      const std::vector<double>& a = v[r];
      const std::vector<double>& b = v[r + d];
      double dot = 0, aa = 0, bb = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        dot += a[i] * b[i];
        aa += a[i] * a[i];
        bb += b[i] * b[i];
      }
      const double ca = aa >= 1e-8 ? 1 - dot / aa / 2 : 1, cb = bb >= 1e-8 ? 1 - dot / bb / 2 : 1;
      std::vector<double> out(a.size());
      for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
      v[r] = out;
    }
  }
  return v[0];
}

// Rank q's vector of `len` values: f(q, i), the same formula on every rank.
std::vector<double> vector_of(int q, int len, int salt) {
  std::vector<double> v(static_cast<size_t>(len));
  for (int i = 0; i < len; ++i) v[static_cast<size_t>(i)] = std::sin(1.3 * i + 0.7 * q + salt);
  return v;
}

TEST_F(TorchTest, AdasumIsHorovodsCombinationPerTensor) {
  const torch::Tensor mine = torch::tensor(vector_of(r(), 37, 0), torch::kDouble);
  if ((n() & (n() - 1)) != 0) {  // Horovod's CPU Adasum: power-of-two ranks only
    EXPECT_THROW(allreduce(mine, "", ReduceOp::kAdasum), InvalidArgument);
    every_kind_works(n(), r());
    return;
  }
  std::vector<std::vector<double>> all;
  for (int q = 0; q < n(); ++q) all.push_back(vector_of(q, 37, 0));
  const torch::Tensor want = torch::tensor(adasum_reference(all), torch::kDouble);
  EXPECT_LT((allreduce(mine, "", ReduceOp::kAdasum) - want).abs().max().item<double>(), 1e-13);
  // Orthogonal vectors add up, parallel ones average.
  torch::Tensor e = torch::zeros({n()}, torch::kDouble);
  e[r()] = 1.0;
  EXPECT_TRUE(torch::allclose(allreduce(e, "", ReduceOp::kAdasum),
                              torch::ones({n()}, torch::kDouble), 0, 1e-15));
  const torch::Tensor a = torch::tensor(vector_of(0, 9, 3), torch::kDouble);
  EXPECT_TRUE(torch::allclose(allreduce(a * (r() + 1), "", ReduceOp::kAdasum),
                              a * ((n() + 1) / 2.0), 0, 1e-13));
  // Fused in one batch, each tensor keeps its own coefficients (not the concatenation's).
  const torch::Tensor other = torch::tensor(vector_of(r(), 5, 9), torch::kDouble);
  std::vector<std::vector<double>> all_other;
  for (int q = 0; q < n(); ++q) all_other.push_back(vector_of(q, 5, 9));
  std::vector<torch::Tensor> both = grouped_allreduce({mine, other}, "", ReduceOp::kAdasum);
  EXPECT_LT((both[0] - want).abs().max().item<double>(), 1e-13);
  const torch::Tensor want_other = torch::tensor(adasum_reference(all_other), torch::kDouble);
  EXPECT_LT((both[1] - want_other).abs().max().item<double>(), 1e-13);
  // f32 combines in double and rounds once: within f32's rounding of the f64 result.
  const torch::Tensor f = allreduce(mine.to(torch::kFloat), "", ReduceOp::kAdasum);
  EXPECT_LT((f.to(torch::kDouble) - want).abs().max().item<double>(), 1e-6);
  // Integers are refused on every rank, and the engine goes on.
  EXPECT_THROW(allreduce(torch::ones({2}, torch::kInt), "", ReduceOp::kAdasum), InvalidArgument);
  every_kind_works(n(), r());
}

}  // namespace
}  // namespace tessera
