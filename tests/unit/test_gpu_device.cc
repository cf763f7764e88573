// The device interface: every implementation (host, fake, CUDA where a GPU exists) computes the
// batched copy and the reductions exactly as the host's kernels do, for every dtype and op; the
// fake device is truly asynchronous (events order the work, failures travel to the events).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/reduce.h"
#include "gpu/device.h"
#include "gpu/fake_device.h"

namespace tessera {
namespace gpu {
namespace {

const std::vector<DataType> kDtypes = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                       DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
                                       DataType::kUInt8,    DataType::kInt8,    DataType::kInt16};

Clock::time_point soon() { return Clock::now() + std::chrono::seconds(30); }

// Random values of dtype: small integers, or multiples of 0.37 rounded to the float type.
std::vector<unsigned char> random_data(DataType dtype, size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> small(1, 9);
  const size_t es = dtype_size(dtype);
  std::vector<unsigned char> out(count * es);
  const uint16_t one16 = dtype == DataType::kFloat16 ? 0x3c00 : 0x3f80;  // 1.0 in f16 / bf16
  for (size_t i = 0; i < count; ++i) {
    const int k = small(rng);
    unsigned char* at = out.data() + i * es;
    if (!is_floating(dtype)) {
      const int64_t x = k;
      std::memcpy(at, &x, es);  // little-endian: the low bytes
    } else if (dtype == DataType::kFloat64) {
      const double x = k * 0.37;
      std::memcpy(at, &x, es);
    } else if (dtype == DataType::kFloat32) {
      const float x = static_cast<float>(k * 0.37);
      std::memcpy(at, &x, es);
    } else {
      scale(dtype, k * 0.37, &one16, at, 1);  // 1.0 * x, rounded to the half type
    }
  }
  return out;
}

// Runs host bytes through `device`: copies in, applies `op` on a stream, copies back.
class DeviceRunner {
 public:
  explicit DeviceRunner(Device& d) : device_(d), stream_(d.new_stream()) {}
  // Asynchronous, as cudaMemcpyAsync: `host` must outlive the stream's work.
  std::shared_ptr<void> upload(const std::vector<unsigned char>& host) {
    auto buf = device_.allocate(host.size());
    stream_->copy(buf.get(), host.data(), host.size());
    return buf;
  }
  std::vector<unsigned char> download(const std::shared_ptr<void>& buf, size_t bytes) {
    std::vector<unsigned char> host(bytes);
    stream_->copy(host.data(), buf.get(), bytes);
    stream_->record()->synchronize(soon(), "the download");
    return host;
  }
  Stream& stream() { return *stream_; }

 private:
  Device& device_;
  std::unique_ptr<Stream> stream_;
};

// One element of reduce_many, computed independently: f32 arithmetic for f32, f16 and bf16
// (accumulated there, rounded once), f64 for f64, int64 for integers (wrapped when stored).
double reduce_many_element(DataType dtype, ReduceOp op,
                           const std::vector<std::vector<unsigned char>>& in, size_t i,
                           double factor) {
  auto apply = [op](auto a, auto b) -> decltype(a) {
    switch (op) {
      case ReduceOp::kMin:
        return std::min(a, b);
      case ReduceOp::kMax:
        return std::max(a, b);
      case ReduceOp::kProduct:
        return a * b;
      default:
        return a + b;
    }
  };
  auto fold = [&](auto zero) {
    using T = decltype(zero);
    T acc = static_cast<T>(load_as_double(dtype, in[0].data(), i));
    for (size_t k = 1; k < in.size(); ++k) {
      acc = apply(acc, static_cast<T>(load_as_double(dtype, in[k].data(), i)));
    }
    return factor == 1.0 ? static_cast<double>(acc)
                         : static_cast<double>(acc * static_cast<T>(factor));
  };
  if (!is_floating(dtype)) return fold(int64_t{0});
  return dtype == DataType::kFloat64 ? fold(0.0) : fold(0.0f);
}

// reduce_many over `k` inputs (more than one kernel launch takes, with k = 20), the output
// being one of the inputs (the last), against the element-wise reference.
void check_reduce_many(DeviceRunner& run, DataType dtype, ReduceOp op, size_t k, double factor) {
  const size_t count = 517;
  std::vector<std::vector<unsigned char>> in;
  std::vector<std::shared_ptr<void>> dev;
  std::vector<const void*> ptrs;
  for (size_t j = 0; j < k; ++j) {
    in.push_back(random_data(dtype, count, static_cast<uint32_t>(10 + j)));
    dev.push_back(run.upload(in.back()));
    ptrs.push_back(dev.back().get());
  }
  run.stream().reduce_many(dtype, op, ptrs, dev.back().get(), count, factor);
  std::vector<unsigned char> want(in[0].size());
  for (size_t i = 0; i < count; ++i) {
    store_from_double(dtype, want.data(), i, reduce_many_element(dtype, op, in, i, factor));
  }
  EXPECT_EQ(run.download(dev.back(), want.size()), want)
      << reduce_op_name(op) << " over " << k << " inputs, factor " << factor;
}

// Every device computes what the host's kernels compute, bit for bit.
void check_conformance(Device& device) {
  DeviceRunner run(device);
  for (DataType dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const size_t count = 1003;  // odd: the kernels' tails
    const auto a = random_data(dtype, count, 1);
    const auto b = random_data(dtype, count, 2);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      auto da = run.upload(a);
      auto db = run.upload(b);
      run.stream().reduce(dtype, op, da.get(), db.get(), count);
      std::vector<unsigned char> want(b.size());
      reduce(dtype, op, b.data(), a.data(), want.data(), count);
      EXPECT_EQ(run.download(db, b.size()), want) << reduce_op_name(op);
    }
    // Batched copy of three pieces of odd sizes and offsets, plain and scaled.
    for (double factor : {1.0, 0.25}) {
      if (factor != 1.0 && !is_floating(dtype)) continue;
      const size_t es = dtype_size(dtype);
      auto src = run.upload(a);
      const std::vector<unsigned char> zeros(a.size(), 0);  // read by the stream later
      auto dst = run.upload(zeros);
      auto* s = static_cast<unsigned char*>(src.get());
      auto* d = static_cast<unsigned char*>(dst.get());
      const std::vector<CopyItem> items = {{s, d + 7 * es, 100 * es},
                                           {s + 100 * es, d, 7 * es},
                                           {s + 107 * es, d + 107 * es, 896 * es}};
      run.stream().batched_copy(items, dtype, factor);
      std::vector<unsigned char> want(a.size());
      std::vector<unsigned char> scaled(a.size());
      if (factor == 1.0) {
        scaled = a;
      } else {
        scale(dtype, factor, a.data(), scaled.data(), count);
      }
      std::memcpy(want.data() + 7 * es, scaled.data(), 100 * es);
      std::memcpy(want.data(), scaled.data() + 100 * es, 7 * es);
      std::memcpy(want.data() + 107 * es, scaled.data() + 107 * es, 896 * es);
      EXPECT_EQ(run.download(dst, a.size()), want) << "factor " << factor;
    }
  }
  for (DataType dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
      check_reduce_many(run, dtype, op, 1, 1.0);
      check_reduce_many(run, dtype, op, 20, 1.0);
    }
    check_reduce_many(run, dtype, ReduceOp::kProduct, 3, 1.0);
    if (is_floating(dtype)) check_reduce_many(run, dtype, ReduceOp::kSum, 4, 0.25);
  }
  EXPECT_THROW(run.stream().batched_copy({}, DataType::kInt32, 0.5), InvalidArgument);
  EXPECT_THROW(
      run.stream().reduce_many(DataType::kInt32, ReduceOp::kSum, {nullptr}, nullptr, 1, 0.5),
      InvalidArgument);
  EXPECT_THROW(run.stream().reduce(DataType::kFloat32, ReduceOp::kAverage, nullptr, nullptr, 1),
               InvalidArgument);
}

TEST(GpuDevice, HostDeviceMatchesTheHostKernels) { check_conformance(host_device()); }

TEST(GpuDevice, FakeDeviceMatchesTheHostKernels) {
  FakeDevice fake({0, 50, 7});
  check_conformance(fake);
}

TEST(GpuDevice, CudaDeviceMatchesTheHostKernels) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU: " << cuda_unavailable_reason();
  auto cuda = cuda_device(0);
  check_conformance(*cuda);
}

// What one process writes into its shared memory, another mapping of the handle reads (here
// within one process; the IPC tests cover other processes), and the segment goes with its owner.
TEST(FakeDevice, SharedMemoryOpensFromItsHandle) {
  FakeDevice fake({0, 0, 1});
  SharedMemory m = fake.allocate_shared(1000);
  ASSERT_EQ(m.handle.size(), kSharedHandleBytes);
  std::shared_ptr<void> other = fake.open_shared(m.handle);
  ASSERT_NE(other.get(), m.memory.get());  // another mapping of the same pages
  std::memcpy(m.memory.get(), "tessera", 8);
  EXPECT_STREQ(static_cast<const char*>(other.get()), "tessera");
  other.reset();
  const std::vector<char> handle = m.handle;
  m.memory.reset();
  EXPECT_THROW(fake.open_shared(handle), DeviceError);
}

// A process killed before freeing its segments leaves them in /dev/shm; a later process given the
// same pid (mpi_torch_device_np4 once met one in make test) must not fail on the name.
TEST(FakeDevice, ADeadProcessesSegmentUnderThisPidIsReplaced) {
  FakeDevice fake({0, 0, 1});
  SharedMemory first = fake.allocate_shared(256);
  // The next name this process will make: the same pid, the counter one up.
  const std::string made(first.handle.data() + sizeof(uint64_t));
  const size_t dash = made.rfind('-');
  const std::string stale =
      made.substr(0, dash + 1) + std::to_string(std::stoull(made.substr(dash + 1)) + 1);
  const int fd = shm_open(stale.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0) << stale;
  close(fd);
  SharedMemory second = fake.allocate_shared(256);  // threw "File exists" before
  std::memcpy(second.memory.get(), "fresh", 6);
  EXPECT_STREQ(static_cast<const char*>(fake.open_shared(second.handle).get()), "fresh");
}

TEST(GpuDevice, TheHostDeviceSharesNoMemory) {
  EXPECT_FALSE(host_device().shares_memory());
  EXPECT_THROW(host_device().allocate_shared(8), DeviceError);
}

// A framework's stream (wrap_stream): our events record on it and it waits on ours, in order,
// and dropping the wrapper leaves the stream usable (its owner destroys it, not us).
TEST(GpuDevice, AWrappedCudaStreamOrdersWorkAndOutlivesItsWrapper) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU: " << cuda_unavailable_reason();
  auto cuda = cuda_device(0);
  std::unique_ptr<Stream> owner = cuda->new_stream(), ours = cuda->new_stream();
  const size_t bytes = 1 << 20;
  auto a = cuda->allocate(bytes), b = cuda->allocate(bytes);
  std::vector<char> in(bytes, 5), out(bytes, 0);
  {
    std::unique_ptr<Stream> theirs = cuda->wrap_stream(owner->native_handle());
    EXPECT_EQ(theirs->native_handle(), owner->native_handle());
    theirs->copy(a.get(), in.data(), bytes);
    ours->wait(theirs->record());  // ours copies a only after their upload
    ours->copy(b.get(), a.get(), bytes);
    theirs->wait(ours->record());
    theirs->copy(out.data(), b.get(), bytes);
  }
  owner->record()->synchronize(Clock::now() + std::chrono::seconds(30), "the owner's stream");
  EXPECT_EQ(out, in);
}

TEST(GpuDevice, OnlyCudaWrapsANativeStream) {
  EXPECT_THROW(host_device().wrap_stream(nullptr), DeviceError);
  FakeDevice fake;
  EXPECT_THROW(fake.wrap_stream(nullptr), DeviceError);
}

TEST(GpuDevice, WithoutAGpuCudaDeviceSaysWhatIsMissing) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  try {
    cuda_device(0);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0 requested but"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(cuda_unavailable_reason()), std::string::npos);
  }
}

TEST(FakeDevice, WorkRunsLaterOnTheStreamThread) {
  FakeDevice fake({200000, 200000, 1});  // every operation waits 200 ms
  auto stream = fake.new_stream();
  int src = 42, dst = 0;
  stream->copy(&dst, &src, sizeof(int));
  auto event = stream->record();
  EXPECT_FALSE(event->done());
  EXPECT_EQ(dst, 0);  // still queued
  event->synchronize(soon(), "the copy");
  EXPECT_TRUE(event->done());
  EXPECT_EQ(dst, 42);
}

TEST(FakeDevice, SynchronizeHasADeadline) {
  FakeDevice fake({300000, 300000, 1});
  auto stream = fake.new_stream();
  int src = 1, dst = 0;
  stream->copy(&dst, &src, sizeof(int));
  EXPECT_THROW(stream->record()->synchronize(Clock::now() + std::chrono::milliseconds(10), "x"),
               TimeoutError);
}

// Stream B waits on A's event: B's copy reads what A wrote, however A's delays fall.
TEST(FakeDevice, AnEventOrdersWorkAcrossStreams) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    FakeDevice fake({0, 2000, seed});
    auto a = fake.new_stream();
    auto b = fake.new_stream();
    std::vector<int> x(64, 0), y(64, -1), ones(64, 1);
    for (int k = 0; k < 5; ++k)
      a->reduce(DataType::kInt32, ReduceOp::kSum, ones.data(), x.data(), 64);
    b->wait(a->record());
    b->copy(y.data(), x.data(), 64 * sizeof(int));
    b->record()->synchronize(soon(), "b");
    EXPECT_EQ(y, std::vector<int>(64, 5)) << "seed " << seed;
  }
}

// A failing operation: the stream's later events fail with its message, later work on the
// stream is skipped, and a stream that waits on one of those events inherits the failure.
TEST(FakeDevice, AFailureReachesEveryLaterEventWithItsMessage) {
  FakeDevice fake({0, 100, 3});
  auto a = fake.new_stream();
  auto b = fake.new_stream();
  int src = 7, dst = 0, other = 0;
  auto before = a->record();
  fake.fail_next("fake kernel fault in batched copy");
  a->copy(&dst, &src, sizeof(int));
  auto after = a->record();
  a->copy(&other, &src, sizeof(int));
  auto later = a->record();
  b->wait(later);
  auto b_event = b->record();
  EXPECT_NO_THROW(before->synchronize(soon(), "before"));
  for (auto* e : {&after, &later, &b_event}) {
    try {
      (*e)->synchronize(soon(), "after");
      FAIL() << "expected DeviceError";
    } catch (const DeviceError& err) {
      EXPECT_STREQ(err.what(), "fake kernel fault in batched copy");
    }
    EXPECT_THROW((*e)->done(), DeviceError);
  }
  EXPECT_EQ(dst, 0);
  EXPECT_EQ(other, 0);  // skipped, as CUDA skips work after a sticky error
}

}  // namespace
}  // namespace gpu
}  // namespace tessera
