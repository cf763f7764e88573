// The host as a device: every operation runs at once on the calling thread, so every event is
// complete when it is recorded. Today's CPU path, behind the device interface.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/reduce.h"
#include "gpu/device.h"
#include "gpu/host_ops.h"

namespace tessera {
namespace gpu {

const char* device_type_name(DeviceType type) { return type == DeviceType::kCuda ? "cuda" : "cpu"; }

void host_batched_copy(const std::vector<CopyItem>& items, DataType dtype, double factor) {
  check_copy_factor(dtype, factor);
  for (const CopyItem& c : items) {
    if (c.bytes == 0) continue;
    if (factor == 1.0) {
      std::memcpy(c.dst, c.src, c.bytes);
    } else {
      scale(dtype, factor, c.src, c.dst, c.bytes / dtype_size(dtype));
    }
  }
}

void check_copy_factor(DataType dtype, double factor) {
  TESSERA_CHECK(factor == 1.0 || is_floating(dtype), "a scale factor (", factor,
                ") applies to floating-point data (f32, f64, f16, bf16), not ", dtype_name(dtype));
}

void host_reduce(DataType dtype, ReduceOp op, const void* in, void* inout, size_t count) {
  TESSERA_CHECK(op != ReduceOp::kAverage,
                "a device reduction takes sum, min, max, prod, band or bor; average is a sum "
                "followed by a scale");
  reduce(dtype, op, inout, in, inout, count);
}

namespace {

// Element i of a half-precision buffer as f32, or the same value back.
float half_to_float(DataType dtype, const void* p, size_t i) {
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return dtype == DataType::kFloat16 ? f16_to_float(h) : bf16_to_float(h);
}
uint16_t float_to_half(DataType dtype, float f) {
  return dtype == DataType::kFloat16 ? float_to_f16(f) : float_to_bf16(f);
}

// reduce_many for f16 and bf16: every input widened to f32, reduced and scaled there, rounded
// once (as the CUDA kernel does).
void reduce_many_halves(DataType dtype, ReduceOp op, const std::vector<const void*>& inputs,
                        void* out, size_t count, double factor) {
  std::vector<float> acc(count), next(count);
  for (size_t i = 0; i < count; ++i) acc[i] = half_to_float(dtype, inputs[0], i);
  for (size_t k = 1; k < inputs.size(); ++k) {
    for (size_t i = 0; i < count; ++i) next[i] = half_to_float(dtype, inputs[k], i);
    reduce(DataType::kFloat32, op, acc.data(), next.data(), acc.data(), count);
  }
  const float f = static_cast<float>(factor);
  for (size_t i = 0; i < count; ++i) {
    static_cast<uint16_t*>(out)[i] = float_to_half(dtype, factor == 1.0 ? acc[i] : acc[i] * f);
  }
}

}  // namespace

void host_reduce_many(DataType dtype, ReduceOp op, const std::vector<const void*>& inputs,
                      void* out, size_t count, double factor) {
  TESSERA_CHECK(op != ReduceOp::kAverage,
                "a device reduction takes sum, min, max, prod, band or bor; average is a sum "
                "followed by a scale");
  TESSERA_CHECK(!inputs.empty(), "reduce_many needs at least one input");
  check_copy_factor(dtype, factor);
  if (count == 0) return;
  if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) {
    return reduce_many_halves(dtype, op, inputs, out, count, factor);
  }
  // Into a temporary first: `out` may be one of the inputs.
  const size_t bytes = count * dtype_size(dtype);
  std::vector<char> acc(static_cast<const char*>(inputs[0]),
                        static_cast<const char*>(inputs[0]) + bytes);
  for (size_t k = 1; k < inputs.size(); ++k)
    reduce(dtype, op, acc.data(), inputs[k], acc.data(), count);
  if (factor != 1.0) scale(dtype, factor, acc.data(), acc.data(), count);
  std::memcpy(out, acc.data(), bytes);
}

std::unique_ptr<Stream> Device::wrap_stream(void*) {
  throw DeviceError(detail::concat(name(), " has no native streams to wrap"));
}

SharedMemory Device::allocate_shared(size_t) {
  throw DeviceError(detail::concat(name(), " has no memory other processes can open (CUDA IPC ",
                                   "needs a CUDA device; the fake device uses shared memory)"));
}

std::shared_ptr<void> Device::open_shared(const std::vector<char>&) {
  throw DeviceError(detail::concat(name(), " cannot open another process's memory"));
}

std::shared_ptr<void> host_allocate(size_t bytes) {
  const size_t rounded = (bytes + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded == 0 ? 256 : rounded);
  if (p == nullptr) throw DeviceError(detail::concat("cannot allocate ", bytes, " bytes"));
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

namespace {

class DoneEvent : public Event {
 public:
  bool done() override { return true; }
  void synchronize(Clock::time_point, const std::string&) override {}
};

class HostStream : public Stream {
 public:
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memmove(dst, src, bytes);
  }
  void batched_copy(const std::vector<CopyItem>& items, DataType dtype, double factor) override {
    host_batched_copy(items, dtype, factor);
  }
  void reduce(DataType dtype, ReduceOp op, const void* in, void* inout, size_t count) override {
    host_reduce(dtype, op, in, inout, count);
  }
  void reduce_many(DataType dtype, ReduceOp op, const std::vector<const void*>& inputs, void* out,
                   size_t count, double factor) override {
    host_reduce_many(dtype, op, inputs, out, count, factor);
  }
  std::shared_ptr<Event> record() override { return std::make_shared<DoneEvent>(); }
  void wait(const std::shared_ptr<Event>& event) override {
    // Work enqueued here runs at once, so it must not start before `event`'s work has run.
    event->synchronize(Clock::now() + std::chrono::hours(1), "an event of another stream");
  }
};

class HostDevice : public Device {
 public:
  DeviceType type() const override { return DeviceType::kCpu; }
  int index() const override { return 0; }
  std::string name() const override { return "cpu"; }
  std::string physical_id() const override { return "cpu"; }
  std::unique_ptr<Stream> new_stream() override { return std::make_unique<HostStream>(); }
  std::shared_ptr<void> allocate(size_t bytes) override { return host_allocate(bytes); }
  std::shared_ptr<void> allocate_host(size_t bytes) override { return host_allocate(bytes); }
};

}  // namespace

Device& host_device() {
  static HostDevice device;
  return device;
}

}  // namespace gpu
}  // namespace tessera
