// The libtorch API on device tensors. TESSERA_TEST_TORCH_DEVICE picks where:
//   fake (default): CPU tensors go through the device path on each rank's fake device
//        (detail::set_stand_in_device), with the caller's "current stream" a fake stream far
//        slower than the engine's: a tensor's producer writes it there, so a binding that did not
//        make the engine wait for the caller's stream reduces stale data, and one whose result the
//        caller's stream did not wait for reads it too early;
//   cuda: real CUDA tensors on GPU 0 (a CUDA libtorch and a GPU; skipped otherwise, saying why).
// One mode per process: a rank keeps the first device its engine was given.
//
// The fake mode's limit: libtorch's own CPU operations run at once on the host, not on the fake
// caller's stream, so where the binding itself computes on the input before enqueuing (a
// non-contiguous tensor's copy, broadcast's clone, the optimizer's hooks) the test settles the
// caller's stream first; on CUDA those operations are ordered on the current stream.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "gpu/device.h"
#include "gpu/fake_device.h"
#include "mpi/torch_test_util.h"
#include "tessera/torch.h"
#include "torch/device_tensors.h"

namespace tessera {
namespace {

using gpu::Clock;

// The fake caller's stream lags every operation by this much: far longer than the engine's
// streams (up to 200 us) and than the time between a call and the engine's first look.
constexpr int kCallerLagUs = 20000;

bool cuda_mode() {
  const char* mode = std::getenv("TESSERA_TEST_TORCH_DEVICE");
  return mode != nullptr && std::string(mode) == "cuda";
}

class TorchDeviceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!cuda_mode()) {
      gpu::FakeDeviceOptions o;
      o.seed = 11;
      o.slow_stream = 0;  // the first stream made: the caller's, below
      o.slow_delay_us = kCallerLagUs;
      device_ = new gpu::FakeDevice(o);
      caller_ = std::shared_ptr<gpu::Stream>(device_->new_stream());
      detail::set_stand_in_device(device_, [] { return caller_; });
    }
    init();
    static const auto* const shutdown_at_end =
        ::testing::AddGlobalTestEnvironment(new ShutdownAtEnd);
    (void)shutdown_at_end;
  }
  void SetUp() override {
    if (cuda_mode() && !torch::cuda::is_available()) {
      GTEST_SKIP() << "TESSERA_TEST_TORCH_DEVICE=cuda, but this libtorch sees no GPU (a CPU "
                      "build of libtorch, or no GPU here)";
    }
  }
  static int r() { return rank(); }
  static int n() { return size(); }

  // `host`'s values as the caller's device tensor, written by the caller's stream (fake: the
  // slow stream, so they land long after this returns).
  static torch::Tensor on_device(const torch::Tensor& host) {
    if (cuda_mode()) return host.to(torch::kCUDA);
    torch::Tensor t = torch::full_like(host, -7);
    auto source = std::make_shared<torch::Tensor>(host.contiguous());
    caller_->copy(t.data_ptr(), source->data_ptr(), static_cast<size_t>(t.nbytes()));
    keep(source);
    keep(std::make_shared<torch::Tensor>(t));  // a caller may drop it before the copy ran
    return t;
  }
  // `t` read back through the caller's stream (what its later work would see).
  static torch::Tensor to_host(const torch::Tensor& t) {
    if (cuda_mode()) return t.cpu();
    torch::Tensor out = torch::empty_like(t);
    caller_->copy(out.data_ptr(), t.data_ptr(), static_cast<size_t>(t.nbytes()));
    caller_->record()->synchronize(Clock::now() + std::chrono::seconds(60), "to_host");
    return out;
  }
  // Fake mode: waits until the caller's stream has run what was enqueued on it (see the top).
  static void settle() {
    if (!cuda_mode())
      caller_->record()->synchronize(Clock::now() + std::chrono::seconds(60), "settle");
  }
  // Every rank but the odd ones uses the device; odd ranks give host tensors for one call.
  static void host_tensors_on_odd_ranks(bool on) {
    if (cuda_mode() || r() % 2 == 0) return;
    if (on) {
      detail::set_stand_in_device(nullptr);
    } else {
      detail::set_stand_in_device(device_, [] { return caller_; });
    }
  }

  static gpu::FakeDevice* device_;  // leaked: the engine may use it until the process ends
  static std::shared_ptr<gpu::Stream> caller_;

 private:
  // The caller's copies read their sources later: held until the process ends (small).
  static void keep(std::shared_ptr<torch::Tensor> t) {
    static std::mutex mu;
    static std::vector<std::shared_ptr<torch::Tensor>> kept;
    std::lock_guard<std::mutex> lock(mu);
    kept.push_back(std::move(t));
  }
  class ShutdownAtEnd : public ::testing::Environment {
   public:
    void TearDown() override { shutdown(); }
  };
};

gpu::FakeDevice* TorchDeviceTest::device_ = nullptr;
std::shared_ptr<gpu::Stream> TorchDeviceTest::caller_;

TEST_F(TorchDeviceTest, TheCallersStreamLagsSoTheTestsBelowCanFail) {
  if (cuda_mode()) GTEST_SKIP() << "the fake caller's stream only";
  torch::Tensor host = torch::arange(8, torch::kFloat);
  torch::Tensor t = on_device(host);
  // kCallerLagUs has not passed: the copy has not run, so reading now sees the old values.
  EXPECT_TRUE(torch::equal(t, torch::full_like(host, -7)));
  EXPECT_TRUE(torch::equal(to_host(t), host));
}

TEST_F(TorchDeviceTest, AllreduceEveryDtypeInAndOutOfPlace) {
  for (torch::ScalarType type : {torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16,
                                 torch::kInt, torch::kLong, torch::kByte}) {
    // Element i on rank r is (r + 1) + (i % 5): the sum is n(n+1)/2 + n (i % 5).
    const torch::Tensor host = (torch::arange(37) % 5 + (r() + 1)).to(type);
    const torch::Tensor sum = (torch::arange(37) % 5 * n() + n() * (n() + 1) / 2).to(torch::kLong);
    const std::string name = std::string(".") + c10::toString(type);
    torch::Tensor out = allreduce(on_device(host), "dev.sum" + name, ReduceOp::kSum);
    EXPECT_TRUE(torch::equal(to_host(out).to(torch::kLong), sum)) << c10::toString(type);
    torch::Tensor t = on_device(host);
    allreduce_(t, "dev.sum_" + name, ReduceOp::kSum);
    EXPECT_TRUE(torch::equal(to_host(t).to(torch::kLong), sum)) << c10::toString(type);
    if (torch::isFloatingType(type)) {
      // Halves and small integers: exact in every floating dtype.
      torch::Tensor avg = allreduce(on_device(host), "dev.avg" + name);
      EXPECT_TRUE(torch::equal(to_host(avg).to(torch::kDouble), sum.to(torch::kDouble) / n()))
          << c10::toString(type);
    }
  }
}

TEST_F(TorchDeviceTest, AsyncHandlesScaledAndNonContiguous) {
  torch::Tensor base = on_device(torch::arange(12, torch::kFloat).reshape({3, 4}) * (r() + 1));
  torch::Tensor t = base.t();  // reduced through a contiguous copy, written back
  settle();
  TensorHandle h = allreduce_async_(t, "dev.inplace.t", ReduceOp::kSum);
  // An input the caller drops at once: the handle and the engine keep it alive.
  TensorHandle scaled =
      allreduce_async(on_device(torch::ones({5})), "dev.scaled", ReduceOp::kSum, 2.0, 0.5);
  synchronize(h);
  const double k = n() * (n() + 1) / 2.0;
  EXPECT_TRUE(torch::equal(to_host(t), torch::arange(12, torch::kFloat).reshape({3, 4}).t() * k));
  EXPECT_TRUE(torch::equal(to_host(synchronize(scaled)), torch::full({5}, float(n()))));
}

TEST_F(TorchDeviceTest, GroupedAllreduceFusesDeviceTensors) {
  std::vector<torch::Tensor> ts = {on_device(torch::full({3}, r() + 1.0)),
                                   on_device(torch::full({2, 2}, 2.0 * r())),
                                   on_device(torch::full({1}, 1.0))};
  std::vector<torch::Tensor> out = grouped_allreduce(ts, "dev.grouped", ReduceOp::kSum);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(torch::equal(to_host(out[0]), torch::full({3}, n() * (n() + 1) / 2.0)));
  EXPECT_TRUE(torch::equal(to_host(out[1]), torch::full({2, 2}, 1.0 * n() * (n() - 1))));
  EXPECT_TRUE(torch::equal(to_host(out[2]), torch::full({1}, 1.0 * n())));
  std::vector<std::string> names = {"dev.g_.0", "dev.g_.1", "dev.g_.2"};
  std::vector<torch::Tensor> in_place = {on_device(torch::full({3}, r() + 1.0)),
                                         on_device(torch::full({2, 2}, 2.0 * r())),
                                         on_device(torch::full({1}, 1.0))};
  for (TensorHandle& h : grouped_allreduce_async_(in_place, names, ReduceOp::kSum)) synchronize(h);
  EXPECT_TRUE(torch::equal(to_host(in_place[1]), torch::full({2, 2}, 1.0 * n() * (n() - 1))));
}

TEST_F(TorchDeviceTest, AllgatherBroadcastAlltoallReducescatter) {
  // Allgather, uneven: rank r gives r + 1 rows of r; the result is a device tensor.
  torch::Tensor g = allgather(on_device(torch::full({r() + 1, 2}, double(r()))), "dev.gather");
  ASSERT_EQ(g.size(0), n() * (n() + 1) / 2);
  EXPECT_EQ(g.device(), on_device(torch::zeros({1})).device());
  torch::Tensor gh = to_host(g);
  for (int k = 0, row = 0; k < n(); ++k) {
    for (int j = 0; j <= k; ++j, ++row) EXPECT_EQ(gh[row][1].item<double>(), k) << row;
  }
  const int root = n() - 1;
  torch::Tensor x = on_device(torch::full({4}, int64_t(r() * 10)));
  settle();  // the out-of-place broadcast clones it first
  EXPECT_TRUE(torch::equal(to_host(broadcast(x, root, "dev.bcast")), torch::full({4}, root * 10L)));
  EXPECT_TRUE(torch::equal(to_host(x), torch::full({4}, r() * 10L)));  // out of place
  broadcast_(x, 0, "dev.bcast_");
  EXPECT_TRUE(torch::equal(to_host(x), torch::zeros({4}, torch::kLong)));
  // Block j of rank r holds 100 r + j; rank r receives 100 k + r from every rank k.
  torch::Tensor a = on_device((torch::arange(n()) + 100 * r()).to(torch::kInt).reshape({n(), 1}));
  torch::Tensor b = to_host(alltoall(a, "dev.a2a"));
  for (int k = 0; k < n(); ++k) EXPECT_EQ(b[k][0].item<int>(), 100 * k + r());
  // Reduce-scatter: row i of every rank is i + r; rank r keeps the sum of its row.
  torch::Tensor rows = on_device((torch::arange(n()).reshape({n(), 1}) + r()).to(torch::kFloat));
  TensorHandle h = reducescatter_async(rows, "dev.rs", ReduceOp::kSum);
  torch::Tensor mine = to_host(synchronize(h));
  EXPECT_EQ(mine.size(0), 1);
  EXPECT_EQ(mine[0][0].item<float>(), n() * r() + n() * (n() - 1) / 2.0f);
}

// An allgather's result comes from torch's allocator on the caller's stream, not from the
// device's own allocate (cudaMalloc on a GPU, whose cudaFree synchronises the whole device
// when the result is dropped). Issue 33: every allgather allocated one raw buffer.
TEST_F(TorchDeviceTest, AllgatherResultsComeFromTorchsAllocator) {
  if (cuda_mode()) GTEST_SKIP() << "counts the fake device's allocations";
  settle();
  const uint64_t before = device_->allocations();
  for (int k = 0; k < 3; ++k) {
    torch::Tensor g = allgather(on_device(torch::full({r() + 1, 3}, float(r() + k))), "dev.g3");
    torch::Tensor gh = to_host(g);
    ASSERT_EQ(gh.size(0), n() * (n() + 1) / 2);
    for (int q = 0, row = 0; q < n(); ++q) {
      for (int j = 0; j <= q; ++j, ++row) ASSERT_EQ(gh[row][2].item<float>(), q + k) << row;
    }
  }
  EXPECT_EQ(device_->allocations(), before);
}

// synchronize() on a device tensor returns once the collective is enqueued, leaving the wait
// to the caller's stream, so the host can queue the optimizer's step behind the allreduces.
// The device is held busy for 3 s: a synchronize that waited on the host for the device work
// (as before issue 33) returns only after it. One rank: at more, the IPC backend's steps wait
// on the host inside the engine.
TEST_F(TorchDeviceTest, SynchronizeReturnsBeforeTheDeviceWorkRuns) {
  if (cuda_mode()) GTEST_SKIP() << "holds the fake device";
  if (n() != 1) GTEST_SKIP() << "one rank: the IPC backend's steps wait on the host";
  settle();
  detail::set_stand_in_stream_ordered(true);  // consumers on the caller's stream, as on CUDA
  torch::Tensor x = on_device(torch::full({1000}, 3.0f));
  device_->hold(true);
  std::thread release([] {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    device_->hold(false);
  });
  const auto start = Clock::now();
  TensorHandle h = allreduce_async(x, "dev.held", ReduceOp::kSum);
  torch::Tensor y = synchronize(h);
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  release.join();
  detail::set_stand_in_stream_ordered(false);
  EXPECT_LT(took, 1.5) << "synchronize waited for the held device";
  EXPECT_TRUE(torch::equal(to_host(y), torch::full({1000}, 3.0f)));  // through the stream
}

TEST_F(TorchDeviceTest, DistributedOptimizerAveragesDeviceGradients) {
  // loss = sum(w * x_r) with x_r = r + 1: each rank's gradient is x_r, the average (n + 1) / 2,
  // and SGD with lr 1 from zeros leaves w = -(n + 1) / 2 everywhere (exact in f32).
  torch::Tensor w = on_device(torch::zeros({6})).set_requires_grad(true);
  torch::OrderedDict<std::string, torch::Tensor> named;
  named.insert("w", w);
  torch::optim::SGD sgd({w}, torch::optim::SGDOptions(1.0));
  DistributedOptimizer opt(sgd, named);
  opt.zero_grad();
  torch::Tensor x = on_device(torch::full({6}, r() + 1.0f));
  settle();  // the forward and backward below run on the host in fake mode
  (w * x).sum().backward();
  opt.step();
  EXPECT_TRUE(torch::equal(to_host(w.detach()), torch::full({6}, -(n() + 1) / 2.0f)));
}

TEST_F(TorchDeviceTest, HostAndDeviceTensorsOfOneNameFailOnEveryRankNamingThem) {
  if (n() < 2) GTEST_SKIP() << "needs 2 ranks";
  host_tensors_on_odd_ranks(true);
  torch::Tensor t = r() % 2 == 1 ? torch::ones({4}) : on_device(torch::ones({4}));
  std::string error;
  try {
    allreduce(t, "dev.mixed");
  } catch (const std::exception& e) {
    error = e.what();
  }
  host_tensors_on_odd_ranks(false);
  EXPECT_NE(error.find("dev.mixed"), std::string::npos) << error;
  EXPECT_NE(error.find("cpu"), std::string::npos) << error;
  EXPECT_NE(error.find("cuda"), std::string::npos) << error;
  // The engine goes on: the next collective works.
  EXPECT_TRUE(
      torch::equal(to_host(allreduce(on_device(torch::ones({2})), "dev.after", ReduceOp::kSum)),
                   torch::full({2}, float(n()))));
}

TEST_F(TorchDeviceTest, ATensorNeitherOnTheCpuNorOnCudaIsRefusedSayingWhatIsTaken) {
  try {
    allreduce(torch::ones({2}, torch::Device(torch::kMeta)), "dev.meta");
    FAIL() << "a meta tensor was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("meta"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CPU and CUDA"), std::string::npos) << e.what();
  }
}

TEST_F(TorchDeviceTest, ATensorOnAnotherGpuIsRefusedNamingBoth) {
  if (!cuda_mode()) GTEST_SKIP() << "needs CUDA tensors";
  allreduce(torch::ones({1}, torch::kCUDA), "dev.first");  // this rank now uses cuda:0
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "one GPU here";
  try {
    allreduce(torch::ones({1}, torch::Device(torch::kCUDA, 1)), "dev.other");
    FAIL() << "a tensor on cuda:1 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
