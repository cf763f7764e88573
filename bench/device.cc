// `tessera bench <collective> --device cuda|fake`: the device collectives of every backend that
// can run here, in nccl-tests' columns, each row beside a host round trip of the same bytes
// (host buffers, tessera's auto algorithm), and under the ceilings measured in the same run:
// the device's copy bandwidth and the pinned host link in each direction. The fake device
// (host memory, streams on threads) exists to check the bench itself without a GPU.
#include "gpu/device.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#include "bench/collectives.h"
#include "comm/collectives.h"
#include "comm/device_collectives.h"
#include "common/error.h"
#include "gpu/fake_device.h"
#include "tune/model_gradients.h"

namespace tessera {
namespace bench {
namespace {

using comm::Communicator;
using comm::DeviceBackend;

gpu::Clock::time_point deadline(const Communicator& world) {
  return gpu::Clock::now() + std::chrono::duration_cast<gpu::Clock::duration>(
                                 std::chrono::duration<double>(world.settings().timeout_s));
}

std::unique_ptr<gpu::Device> open_device(const std::string& kind, const Communicator& world) {
  if (kind == "fake") {
    return std::make_unique<gpu::FakeDevice>(
        gpu::FakeDeviceOptions{0, 0, static_cast<uint64_t>(world.rank()) + 1});
  }
  if (kind == "cuda") {
    const int count = gpu::cuda_device_count();
    TESSERA_CHECK(count > 0, "--device cuda: no usable GPU here (", gpu::cuda_unavailable_reason(),
                  "); accepted: cpu, cuda where a GPU is, fake (the test device)");
    return gpu::cuda_device(world.local_rank() % count);
  }
  throw InvalidArgument("--device '" + kind + "': accepted cpu, cuda, fake (the test device)");
}

// The backends to measure: each named one (an error if it cannot run here), or with "all"
// every one the selector accepts on this topology.
std::vector<DeviceBackend> backend_list(const BenchOptions& o, const comm::DeviceContext& ctx) {
  std::vector<DeviceBackend> out;
  for (const std::string& name : o.backends) {
    if (name != "all") {
      out.push_back(ctx.backend(comm::parse_device_backend(name)));
      continue;
    }
    for (DeviceBackend b : {DeviceBackend::kNccl, DeviceBackend::kIpc, DeviceBackend::kStaged,
                            DeviceBackend::kHierarchical}) {
      try {
        out.push_back(ctx.backend(b));
      } catch (const InvalidArgument&) {
        // cannot run here: not measured
      }
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The ceilings: bytes per second of one stream copy, every rank copying at once (median of 5,
// slowest rank).
struct Ceilings {
  double device_copy = 0;  // device -> device, GB/s of bytes copied
  double h2d = 0;          // pinned host -> device
  double d2h = 0;          // device -> pinned host
};

Ceilings measure_ceilings(Communicator& world, gpu::Device& dev, gpu::Stream& s, size_t bytes) {
  auto a = dev.allocate(bytes), b = dev.allocate(bytes), h = dev.allocate_host(bytes);
  std::memset(h.get(), 1, bytes);
  auto gbps = [&](void* dst, const void* src) {
    const double us = time_calls(world, 1, 5, [&] {
      s.copy(dst, src, bytes);
      s.record()->synchronize(deadline(world), "a bandwidth copy");
    });
    return static_cast<double>(bytes) / us / 1e3;
  };
  Ceilings c;
  c.h2d = gbps(a.get(), h.get());
  c.device_copy = gbps(b.get(), a.get());
  c.d2h = gbps(h.get(), b.get());
  return c;
}

// One collective on buffers of one kind: what the call does, what its result must be.
struct Call {
  std::function<void()> run;
  std::function<double(size_t)> expect;
  size_t count = 0;        // the row's element count (nccl-tests' meaning)
  size_t check_count = 0;  // elements of the result to check
  size_t moved = 0;        // bytes for algbw
  const void* result = nullptr;
};

// The inputs as every rank fills them (as the host bench), written into `send_host`.
Call plan_call(const BenchOptions& o, const Communicator& world, size_t bytes, char* send_host) {
  const int n = world.size(), r = world.rank();
  const DataType dt = o.dtype;
  const size_t es = dtype_size(dt);
  const std::string& c = o.collective;
  Call call;
  if (c == "allreduce" || c == "broadcast") {
    call.count = bytes / es;
    for (size_t i = 0; i < call.count; ++i) {
      const double v = c == "broadcast" && r != 0 ? 0 : input_value(c == "broadcast" ? 0 : r, i);
      store_from_double(dt, send_host, i, v);
    }
    call.check_count = call.count;
    call.moved = bytes;
    if (c == "allreduce") {
      call.expect = [op = o.op, n](size_t i) { return expected_allreduce(op, n, i); };
    } else {
      call.expect = [](size_t i) { return input_value(0, i); };
    }
  } else if (c == "allgather") {
    call.count = bytes / es / static_cast<size_t>(n);
    for (size_t i = 0; i < call.count; ++i) store_from_double(dt, send_host, i, input_value(r, i));
    call.check_count = call.count * static_cast<size_t>(n);
    call.moved = bytes;
    call.expect = [k = call.count](size_t i) {
      return input_value(static_cast<int>(i / k), i % k);
    };
  } else if (c == "reduce-scatter") {
    call.count = bytes / es / static_cast<size_t>(n);
    for (size_t i = 0; i < call.count * static_cast<size_t>(n); ++i) {
      store_from_double(dt, send_host, i, input_value(r, i));
    }
    call.check_count = call.count;
    call.moved = bytes;
    call.expect = [op = o.op, n, k = call.count, r](size_t i) {
      return expected_allreduce(op, n, static_cast<size_t>(r) * k + i);
    };
  } else if (c == "alltoall") {
    call.count = bytes / es / static_cast<size_t>(n);
    for (int j = 0; j < n; ++j) {
      for (size_t i = 0; i < call.count; ++i) {
        store_from_double(dt, send_host, static_cast<size_t>(j) * call.count + i,
                          ((r * 7 + j) % 50) + 1);
      }
    }
    call.check_count = call.count * static_cast<size_t>(n);
    call.moved = bytes;
    call.expect = [k = call.count, r](size_t i) {
      return ((static_cast<int>(i / k) * 7 + r) % 50) + 1;
    };
  } else {
    throw InvalidArgument("unknown collective '" + c +
                          "'; accepted with --device: allreduce allgather broadcast "
                          "reduce-scatter alltoall");
  }
  return call;
}

// The call on device buffers through `backend` (send/recv device memory), synchronised.
std::function<void()> device_run(const BenchOptions& o, comm::DeviceContext& ctx, gpu::Stream& s,
                                 DeviceBackend backend, const Call& call, void* send, void* recv) {
  comm::DeviceOptions opt;
  opt.backend = backend;
  const int n = ctx.comm().size();
  const DataType dt = o.dtype;
  const ReduceOp op = o.op;
  const size_t k = call.count;
  std::function<void()> f;
  if (o.collective == "allreduce") {
    f = [=, &ctx, &s] { comm::device_allreduce(ctx, s, send, recv, k, dt, op, opt); };
  } else if (o.collective == "broadcast") {
    f = [=, &ctx, &s] { comm::device_broadcast(ctx, s, send, k, dt, 0, opt); };
  } else if (o.collective == "allgather") {
    const std::vector<size_t> counts(static_cast<size_t>(n), k);
    f = [=, &ctx, &s] { comm::device_allgatherv(ctx, s, send, recv, counts, dt, opt); };
  } else if (o.collective == "reduce-scatter") {
    f = [=, &ctx, &s] { comm::device_reduce_scatter(ctx, s, send, recv, k, dt, op, opt); };
  } else {
    const std::vector<size_t> counts(static_cast<size_t>(n), k);
    f = [=, &ctx, &s] { comm::device_alltoallv(ctx, s, send, counts, recv, counts, dt, opt); };
  }
  const Communicator& world = ctx.comm();
  return [f, &s, &world] {
    f();
    s.record()->synchronize(deadline(world), "a benchmarked device collective");
  };
}

// The same call on host buffers with tessera's auto algorithm: the bare host round trip.
std::function<void()> host_run(const BenchOptions& o, Communicator& world, const Call& call,
                               char* send, char* recv) {
  const DataType dt = o.dtype;
  const ReduceOp op = o.op;
  const size_t k = call.count;
  if (o.collective == "allreduce") {
    comm::AllreduceOptions a;
    a.op = op;
    return [=, &world] { comm::allreduce(world, send, recv, k, dt, a); };
  }
  if (o.collective == "broadcast") return [=, &world] { comm::broadcast(world, send, k, dt, 0); };
  if (o.collective == "allgather")
    return [=, &world] { comm::allgather(world, send, recv, k, dt); };
  if (o.collective == "reduce-scatter") {
    return [=, &world] { comm::reduce_scatter(world, send, recv, k, dt, op); };
  }
  return [=, &world] { comm::alltoall(world, send, recv, k, dt); };
}

// Allreduce of S bytes over n ranks, g of them on each GPU (ipc_collectives.h):
//   staged  copies S down and S up, overlapped: max(S/d2h, S/h2d);
//   ipc     each rank reads 3S and writes (2 + 1/n)S of device memory, and the g ranks on a GPU
//           share its memory: g (5 + 1/n) S of traffic, at 2 x the copy rate (a copy of B bytes
//           moves 2B): g (5 + 1/n) S / (2 copy).
// Other backends and collectives: no bound printed (0).
double bound_us(const BenchOptions& o, DeviceBackend b, const Ceilings& c, size_t bytes, int n,
                int per_gpu) {
  if (o.collective != "allreduce") return 0;
  const double s = static_cast<double>(bytes);
  if (b == DeviceBackend::kStaged) return std::max(s / c.d2h, s / c.h2d) / 1e3;
  if (b == DeviceBackend::kIpc) return per_gpu * (5 + 1.0 / n) * s / (2 * c.device_copy) / 1e3;
  return 0;
}

// How many ranks share rank 0's GPU.
int ranks_on_gpu_of_rank0(const comm::DeviceContext& ctx) {
  const auto& ranks = ctx.topology().ranks;
  return static_cast<int>(std::count_if(ranks.begin(), ranks.end(), [&](const auto& r) {
    return r.node == ranks[0].node && r.gpu == ranks[0].gpu;
  }));
}

// 161 tensors of ResNet-50's gradient sizes into one fusion buffer: one batched copy against
// one stream copy per tensor (what fusion without a batched kernel does). Median of 5 each.
void print_fusion(Communicator& world, gpu::Device& dev, gpu::Stream& s) {
  std::vector<double> sizes;
  for (size_t e : tune::resnet50_parameter_elements()) sizes.push_back(4.0 * e);  // f32
  std::vector<std::shared_ptr<void>> tensors;
  std::vector<gpu::CopyItem> items;
  size_t total = 0;
  for (double b : sizes) total += static_cast<size_t>(b);
  auto fusion = dev.allocate(total);
  size_t off = 0;
  for (double b : sizes) {
    tensors.push_back(dev.allocate(static_cast<size_t>(b)));
    items.push_back(
        {tensors.back().get(), static_cast<char*>(fusion.get()) + off, static_cast<size_t>(b)});
    off += static_cast<size_t>(b);
  }
  const double batched = time_calls(world, 2, 5, [&] {
    s.batched_copy(items, DataType::kFloat32, 1.0);
    s.record()->synchronize(deadline(world), "the batched fusion copy");
  });
  const double each = time_calls(world, 2, 5, [&] {
    for (const gpu::CopyItem& c : items) s.copy(c.dst, c.src, c.bytes);
    s.record()->synchronize(deadline(world), "the per-tensor fusion copies");
  });
  if (world.rank() == 0) {
    std::printf(
        "# fusion of ResNet-50's %zu gradients (%.1f MB): one batched copy %.1f us, one copy "
        "per tensor %.1f us: %.2fx\n",
        items.size(), static_cast<double>(total) / 1e6, batched, each, each / batched);
  }
}

void print_header(const BenchOptions& o, const Communicator& world, const gpu::Device& dev,
                  const Ceilings& c, const std::vector<DeviceBackend>& backends, int g) {
  std::string names;
  for (DeviceBackend b : backends)
    names += std::string(names.empty() ? "" : " ") + comm::device_backend_name(b);
  std::printf("# tessera bench %s --device %s: %d ranks on %s (rank 0), %s, dtype %s, op %s\n",
              o.collective.c_str(), o.device.c_str(), world.size(), dev.name().c_str(),
              world.describe().c_str(), dtype_name(o.dtype), reduce_op_name(o.op));
  std::printf("# backends here: %s; host: the same bytes in host memory, tessera's auto\n",
              names.c_str());
  std::printf(
      "# ceilings while every rank copies: device copy %.2f GB/s, pinned host->device %.2f "
      "GB/s, device->host %.2f GB/s\n",
      c.device_copy, c.h2d, c.d2h);
  std::printf(
      "# time: median per call of the slowest rank, stream synchronised; vs_host: host time / "
      "this; bound: allreduce staged max(S/d2h, S/h2d) (both directions overlapped), ipc "
      "g(5+1/n)S/(2 copy) (g = %d ranks per GPU), %%bound = bound / time\n",
      g);
  std::printf("#%11s %12s %6s %6s %13s %11s %9s %9s %7s %7s %9s %7s\n", "size", "count", "type",
              "redop", "backend", "time(us)", "algbw", "busbw", "#wrong", "vs_host", "bound(us)",
              "%bound");
}

}  // namespace

int run_device_bench(const BenchOptions& o) {
  TESSERA_CHECK(!o.calibrate, "--calibrate measures host algorithms; drop --device");
  auto world = Communicator::world();
  auto dev = open_device(o.device, *world);
  auto stream = dev->new_stream();
  comm::DeviceContext ctx(*world, *dev);
  check_op_supported(o.dtype, o.op);
  const int n = world->size();
  const size_t es = dtype_size(o.dtype);
  const bool split = o.collective != "allreduce" && o.collective != "broadcast";
  const std::vector<size_t> all = sizes(o, split ? es * static_cast<size_t>(n) : es);
  const std::vector<DeviceBackend> backends = backend_list(o, ctx);
  const size_t max_bytes = std::max<size_t>(all.back(), 4096);
  const Ceilings ceil = measure_ceilings(*world, *dev, *stream, max_bytes);
  const int per_gpu = ranks_on_gpu_of_rank0(ctx);
  if (world->rank() == 0) print_header(o, *world, *dev, ceil, backends, per_gpu);
  auto send_host = dev->allocate_host(max_bytes), recv_host = dev->allocate_host(max_bytes);
  auto send = dev->allocate(max_bytes), recv = dev->allocate(max_bytes);
  char* sh = static_cast<char*>(send_host.get());
  char* rh = static_cast<char*>(recv_host.get());
  long total_wrong = 0;
  for (size_t bytes : all) {
    const Call call = plan_call(o, *world, bytes, sh);
    if (call.count == 0) continue;
    const int iters = bytes >= (size_t{32} << 20) ? std::max(3, o.iterations / 4) : o.iterations;
    const bool in_place = o.collective == "broadcast";
    // The host round trip (its own copy of the input: broadcast works in place).
    std::vector<char> hs(sh, sh + bytes), hr(bytes);
    const double host_us =
        time_calls(*world, o.warmup, iters, host_run(o, *world, call, hs.data(), hr.data()));
    for (DeviceBackend b : backends) {
      stream->copy(send.get(), sh, bytes);
      auto run = device_run(o, ctx, *stream, b, call, send.get(), recv.get());
      const double us = time_calls(*world, o.warmup, iters, run);
      stream->copy(rh, in_place ? send.get() : recv.get(), call.check_count * es);
      stream->record()->synchronize(deadline(*world), "the result's copy back");
      int64_t wrong = count_wrong(o.dtype, rh, call.check_count, call.expect);
      comm::allreduce(*world, &wrong, &wrong, 1, DataType::kInt64, {});
      total_wrong += wrong;
      const double algbw = static_cast<double>(call.moved) / us / 1e3;
      const double bound = bound_us(o, b, ceil, bytes, n, per_gpu);
      if (world->rank() == 0) {
        std::printf(" %11zu %12zu %6s %6s %13s %11.2f %9.3f %9.3f %7ld %6.2fx", bytes, call.count,
                    dtype_name(o.dtype), reduce_op_name(o.op), comm::device_backend_name(b), us,
                    algbw, algbw * bus_factor(o.collective, n), static_cast<long>(wrong),
                    host_us / us);
        if (bound > 0) {
          std::printf(" %9.2f %6.1f%%\n", bound, 100.0 * bound / us);
        } else {
          std::printf(" %9s %7s\n", "-", "-");
        }
        std::fflush(stdout);
      }
    }
  }
  if (o.collective == "allreduce") print_fusion(*world, *dev, *stream);
  if (world->rank() == 0) std::printf("# #wrong total: %ld\n", total_wrong);
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace bench
}  // namespace tessera
