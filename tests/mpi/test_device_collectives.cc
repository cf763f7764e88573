// Device collectives against the host collectives on the same data, bit for bit, through each
// backend: on every rank's fake device (asynchronous streams with random delays, so a missing
// wait shows; shared memory between the ranks for IPC), and on GPU 0 where this machine has one
// (the ranks then share it: IPC, staged or hierarchical; NCCL at one rank). A backend that
// cannot run on the ranks' layout skips, saying why. Small staging segments reach the
// multi-segment overlap with small counts.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/collectives.h"
#include "comm/device_collectives.h"
#include "common/error.h"
#include "gpu/device.h"
#include "gpu/fake_device.h"
#include "mpi/mpi_test_util.h"

namespace tessera {
namespace comm {
namespace {

using testing::Buf;
using testing::hashed_small;

const std::vector<DataType> kDtypes = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                       DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
                                       DataType::kUInt8,    DataType::kInt8,    DataType::kInt16};
const std::vector<size_t> kCounts = {0, 1, 7, 1023, 20001};

gpu::Clock::time_point soon() { return gpu::Clock::now() + std::chrono::seconds(60); }

// The device under test, by name: "fake" everywhere, "cuda" where a GPU exists.
std::unique_ptr<gpu::Device> make_device(const std::string& kind, int rank) {
  if (kind == "fake")
    return std::make_unique<gpu::FakeDevice>(gpu::FakeDeviceOptions{0, 100, uint64_t(rank) + 1});
  return gpu::cuda_device(0);
}

// "fake/ipc" -> {"fake", "ipc"}.
std::pair<std::string, std::string> split_param(const std::string& p) {
  const size_t slash = p.find('/');
  return {p.substr(0, slash), p.substr(slash + 1)};
}

// "fake/ipc" -> "fake_ipc" (test names take no slash).
std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  const auto parts = split_param(info.param);
  return parts.first + "_" + parts.second;
}

class DeviceCollectivesTest : public testing::WorldTest,
                              public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    kind_ = split_param(GetParam()).first;
    if (kind_ == "cuda" && gpu::cuda_device_count() == 0) {
      GTEST_SKIP() << "no GPU: " << gpu::cuda_unavailable_reason();
    }
    device_ = make_device(kind_, world_->rank());
    stream_ = device_->new_stream();
    ctx_ = std::make_unique<DeviceContext>(*world_, *device_);
    options_.staging_segment_bytes = 4096;
    options_.backend = parse_device_backend(split_param(GetParam()).second);
    try {
      ctx_->backend(options_.backend);
    } catch (const InvalidArgument& e) {  // the same on every rank: the layout is shared
      GTEST_SKIP() << e.what();
    }
  }
  // Device copies of host bytes, and back (synchronised).
  std::shared_ptr<void> upload(const Buf& b) {
    auto d = device_->allocate(b.bytes.size());
    stream_->copy(d.get(), b.bytes.data(), b.bytes.size());
    stream_->record()->synchronize(soon(), "upload");
    return d;
  }
  std::vector<char> download(const std::shared_ptr<void>& d, size_t bytes) {
    return download(d, bytes, *stream_);
  }
  static std::vector<char> download(const std::shared_ptr<void>& d, size_t bytes,
                                    gpu::Stream& stream) {
    std::vector<char> out(std::max<size_t>(bytes, 1));
    stream.copy(out.data(), d.get(), bytes);
    stream.record()->synchronize(soon(), "download");
    out.resize(bytes);
    return out;
  }
  // Values whose reductions are exact in every dtype, so that any order of reduction (the
  // staged path reduces segment by segment, perhaps with another algorithm than one call over
  // the whole buffer) gives the same bits: 1..7 (sums stay far below bf16's 256), or for
  // products 1 or 2 (powers of two; 7^4 is already inexact in f16 and bf16).
  Buf input(DataType dt, size_t count, unsigned salt, ReduceOp op = ReduceOp::kSum) {
    Buf b(dt, count);
    const unsigned range = op == ReduceOp::kProduct ? 2 : 7;
    for (size_t i = 0; i < count; ++i) {
      b.set(i, 1 + hashed_small(salt, world_->rank(), i) % range);
    }
    return b;
  }
  static std::vector<char> first(const Buf& b, size_t bytes) {
    return std::vector<char>(b.bytes.begin(), b.bytes.begin() + static_cast<long>(bytes));
  }

  std::string kind_;  // "fake" or "cuda"
  std::unique_ptr<gpu::Device> device_;
  std::unique_ptr<gpu::Stream> stream_;
  std::unique_ptr<DeviceContext> ctx_;
  DeviceOptions options_;
};

TEST_P(DeviceCollectivesTest, AllreduceEqualsTheHostOnEveryDtypeAndOp) {
  for (DataType dt : kDtypes) {
    for (ReduceOp op :
         {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      if (op == ReduceOp::kAverage && !is_floating(dt)) continue;
      for (size_t count : kCounts) {
        const Buf in = input(dt, count, 1, op);
        Buf want = in;
        AllreduceOptions ho;
        ho.op = op;
        allreduce(*world_, in.bytes.data(), want.data(), count, dt, ho);
        auto d_in = upload(in);
        auto d_out = device_->allocate(in.bytes.size());
        device_allreduce(*ctx_, *stream_, d_in.get(), d_out.get(), count, dt, op, options_);
        const size_t bytes = count * dtype_size(dt);
        ASSERT_EQ(download(d_out, bytes), first(want, bytes))
            << dtype_name(dt) << " " << reduce_op_name(op) << " count " << count;
        // In place.
        device_allreduce(*ctx_, *stream_, d_in.get(), d_in.get(), count, dt, op, options_);
        ASSERT_EQ(download(d_in, bytes), first(want, bytes)) << "in place";
      }
    }
  }
}

// Back to back without a host wait between them, alternating two caller streams: each call's
// copies into the staging buffer must wait for the previous call's copies out of it (made on
// the context's upload stream, whichever stream called), and each result must be ready for
// its caller's stream. On the fake device the upload stream lags far behind the others, so
// dropping either wait fails here.
TEST_P(DeviceCollectivesTest, ConsecutiveCallsShareTheStagingBufferSafely) {
  if (kind_ == "fake") {
    gpu::FakeDeviceOptions slow{0, 500, uint64_t(world_->rank()) + 7};
    slow.slow_stream = 1;  // made second, below: the context's upload stream
    slow.slow_delay_us = 20000;
    ctx_.reset();  // the old device's users go first
    stream_.reset();
    device_ = std::make_unique<gpu::FakeDevice>(slow);
    stream_ = device_->new_stream();
    ctx_ = std::make_unique<DeviceContext>(*world_, *device_);
    ctx_->upload_stream();
  }
  std::unique_ptr<gpu::Stream> other = device_->new_stream();
  const DataType dt = DataType::kFloat32;
  const size_t count = 5001;  // 5 segments
  std::vector<Buf> ins, wants;
  for (unsigned k = 0; k < 6; ++k) {
    ins.push_back(input(dt, count, 10 + k));
    wants.push_back(ins.back());
    allreduce(*world_, ins.back().bytes.data(), wants.back().data(), count, dt, {});
  }
  std::vector<std::shared_ptr<void>> d_ins, outs;
  for (auto& in : ins) d_ins.push_back(upload(in));
  auto caller = [&](size_t k) -> gpu::Stream& { return k % 2 ? *other : *stream_; };
  for (size_t k = 0; k < d_ins.size(); ++k) {
    outs.push_back(device_->allocate(count * 4));
    device_allreduce(*ctx_, caller(k), d_ins[k].get(), outs.back().get(), count, dt, ReduceOp::kSum,
                     options_);
  }
  for (size_t k = outs.size(); k-- > 0;) {  // the latest first: its copies back lag most
    EXPECT_EQ(download(outs[k], count * 4, caller(k)), first(wants[k], count * 4)) << "call " << k;
  }
}

TEST_P(DeviceCollectivesTest, AllgathervBroadcastReduceScatterAlltoallEqualTheHost) {
  const int n = world_->size(), r = world_->rank();
  for (DataType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    const size_t es = dtype_size(dt);
    // allgatherv: rank q contributes 3q+1 elements.
    std::vector<size_t> counts;
    size_t sum = 0;
    for (int q = 0; q < n; ++q) sum += counts.emplace_back(static_cast<size_t>(3 * q + 1));
    const Buf mine = input(dt, counts[static_cast<size_t>(r)], 2);
    Buf want(dt, sum);
    allgatherv(*world_, mine.bytes.data(), want.data(), counts, dt);
    auto d_mine = upload(mine);
    auto d_all = device_->allocate(sum * es);
    device_allgatherv(*ctx_, *stream_, d_mine.get(), d_all.get(), counts, dt, options_);
    EXPECT_EQ(download(d_all, sum * es), first(want, sum * es)) << "allgatherv";
    // broadcast from the last rank.
    Buf b = input(dt, 1000, 3);
    Buf bwant = b;
    broadcast(*world_, bwant.data(), 1000, dt, n - 1);
    auto d_b = upload(b);
    device_broadcast(*ctx_, *stream_, d_b.get(), 1000, dt, n - 1, options_);
    EXPECT_EQ(download(d_b, 1000 * es), first(bwant, 1000 * es)) << "broadcast";
    // reduce-scatter, 129 elements per rank.
    const size_t block = 129;
    const Buf rs = input(dt, block * n, 4);
    Buf rswant(dt, block);
    reduce_scatter(*world_, rs.bytes.data(), rswant.data(), block, dt, ReduceOp::kMax);
    auto d_rs = upload(rs);
    auto d_rsout = device_->allocate(block * es);
    device_reduce_scatter(*ctx_, *stream_, d_rs.get(), d_rsout.get(), block, dt, ReduceOp::kMax,
                          options_);
    EXPECT_EQ(download(d_rsout, block * es), first(rswant, block * es)) << "reduce_scatter";
    // alltoallv: rank r sends r+j+1 elements to rank j.
    std::vector<size_t> sc, rc;
    size_t st = 0, rt = 0;
    for (int j = 0; j < n; ++j) {
      st += sc.emplace_back(static_cast<size_t>(r + j + 1));
      rt += rc.emplace_back(static_cast<size_t>(j + r + 1));
    }
    const Buf a = input(dt, st, 5);
    Buf awant(dt, rt);
    alltoallv(*world_, a.bytes.data(), sc, awant.data(), rc, dt);
    auto d_a = upload(a);
    auto d_aout = device_->allocate(rt * es);
    device_alltoallv(*ctx_, *stream_, d_a.get(), sc, d_aout.get(), rc, dt, options_);
    EXPECT_EQ(download(d_aout, rt * es), first(awant, rt * es)) << "alltoallv";
  }
}

// The caller's stream still has a write into the buffer pending when broadcast is called (as
// after model.cuda(): each rank's initial weights, the root's among them): the broadcast must
// land after it, on every backend. On the fake device the callers' streams lag behind the
// others, the non-roots' far more than the root's (whose copy down to the host the non-roots
// wait for in the host broadcast): a copy back on the context's upload stream that does not
// wait for the caller's stream is then overwritten by the pending write (issue 33: the staged
// broadcast's non-root ranks did exactly that).
TEST_P(DeviceCollectivesTest, BroadcastLandsAfterTheCallersPendingWrite) {
  const int root = 0;
  if (kind_ == "fake") {
    gpu::FakeDeviceOptions lagging{0, 100, uint64_t(world_->rank()) + 11};
    lagging.slow_stream = 0;  // made first, below: the caller's stream
    lagging.slow_delay_us = world_->rank() == root ? 2000 : 100000;
    ctx_.reset();
    stream_.reset();
    device_ = std::make_unique<gpu::FakeDevice>(lagging);
    stream_ = device_->new_stream();
    ctx_ = std::make_unique<DeviceContext>(*world_, *device_);
  }
  const DataType dt = DataType::kFloat32;
  const size_t count = 3000;
  const Buf init = input(dt, count, 20);  // differs by rank
  Buf want = init;
  broadcast(*world_, want.data(), count, dt, root);
  auto staged_init = upload(init);  // synchronised: ready
  auto weights = device_->allocate(count * 4);
  stream_->copy(weights.get(), staged_init.get(), count * 4);  // still pending at the call
  device_broadcast(*ctx_, *stream_, weights.get(), count, dt, root, options_);
  EXPECT_EQ(download(weights, count * 4), first(want, count * 4));
}

// Ranks whose alltoallv counts disagree fail on every rank alike, naming the pair (IPC checks
// every rank's counts, since a rank that threw alone would leave the others waiting).
TEST_P(DeviceCollectivesTest, IpcAlltoallvWithDisagreeingCountsFailsOnEveryRank) {
  if (options_.backend != DeviceBackend::kIpc || world_->size() < 2) {
    GTEST_SKIP() << "IPC at 2 ranks or more";
  }
  const auto n = static_cast<size_t>(world_->size());
  std::vector<size_t> sc(n, 1), rc(n, 1);
  if (world_->rank() == 0) sc[1] = 2;  // rank 1 expects 1
  auto d_in = device_->allocate(16 * n), d_out = device_->allocate(16 * n);
  try {
    device_alltoallv(*ctx_, *stream_, d_in.get(), sc, d_out.get(), rc, DataType::kFloat32,
                     options_);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 sends 2 elements to rank 1, which expects 1"),
              std::string::npos)
        << e.what();
  }
}

// A device operation failing on one rank only (injected, as an ECC error would be) is an error
// on every rank, across nodes too: its own message there, the failing rank named elsewhere;
// nobody waits for it or reads a buffer it never wrote.
TEST_P(DeviceCollectivesTest, IpcFailureOnOneRankFailsEveryRank) {
  if (kind_ != "fake" || options_.backend == DeviceBackend::kStaged || world_->size() < 2) {
    GTEST_SKIP() << "the fake device's IPC and hierarchical backends at 2 ranks or more";
  }
  auto* fake = static_cast<gpu::FakeDevice*>(device_.get());
  const Buf in = input(DataType::kFloat32, 1000, 6);
  auto d_in = upload(in);
  auto d_out = device_->allocate(4000);
  if (world_->rank() == 1) fake->fail_next("injected: uncorrectable ECC error");
  try {
    device_allreduce(*ctx_, *stream_, d_in.get(), d_out.get(), 1000, DataType::kFloat32,
                     ReduceOp::kSum, options_);
    ADD_FAILURE() << "expected DeviceError";
  } catch (const DeviceError& e) {
    const std::string what = e.what();
    const std::string want = world_->rank() == 1 ? "injected: uncorrectable ECC error"
                                                 : "failed on the device of rank(s) 1";
    EXPECT_NE(what.find(want), std::string::npos) << what;
  }
}

// The ranks of this test share one device (every fake device 0 is one "GPU"; on a GPU machine
// they share GPU 0). auto takes IPC on one node, hierarchical across nodes of equal size,
// staged otherwise; NCCL forced is refused naming the ranks (at one rank it may run where the
// build has NCCL and the device is real).
TEST_P(DeviceCollectivesTest, SharedDeviceTakesIpcAndRefusesForcedNccl) {
  const DeviceBackend chosen = ctx_->backend(DeviceBackend::kAuto);
  if (world_->size() > 1) {
    EXPECT_NE(chosen, DeviceBackend::kNccl);
    try {
      ctx_->backend(DeviceBackend::kNccl);
      FAIL() << "expected InvalidArgument";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.find("ranks 0 and 1") != std::string::npos ||
                  what.find("ranks 0, 1") != std::string::npos ||
                  what.find("NCCL needs CUDA devices") != std::string::npos)
          << what;
    }
  }
  if (kind_ == "fake" || world_->size() > 1) {
    const DeviceBackend expected = world_->num_nodes() == 1  ? DeviceBackend::kIpc
                                   : world_->uniform_nodes() ? DeviceBackend::kHierarchical
                                                             : DeviceBackend::kStaged;
    EXPECT_EQ(chosen, expected) << device_backend_name(chosen);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceCollectivesTest,
                         ::testing::Values("fake/ipc", "fake/staged", "fake/hierarchical",
                                           "cuda/ipc", "cuda/staged", "cuda/hierarchical",
                                           "cuda/nccl"),
                         param_name);

}  // namespace
}  // namespace comm
}  // namespace tessera
