// The device interface: memory, streams and events, and the few kernels the collectives and the
// engine need (batched copies with a scale factor, element-wise reductions).
//
// Three implementations:
//   - host_device(): plain host memory, every operation done at once on the calling thread
//     (today's CPU path, written against this interface);
//   - FakeDevice (fake_device.h): host memory with asynchronous "streams" on threads and random
//     delays, so CI can test event ordering and error propagation without a GPU;
//   - cuda_device(i) (built with CUDA only): CUDA streams, events and kernels on GPU i.
//
// Semantics follow CUDA's: work enqueued on one stream runs in order; an event completes when
// the work enqueued before it has run; Stream::wait(event) makes later work on the stream wait
// for it without blocking the host. An operation that fails makes its stream's later events
// fail with its message (CUDA's errors are sticky in the same way).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace tessera {
namespace gpu {

using Clock = std::chrono::steady_clock;

enum class DeviceType : uint8_t { kCpu, kCuda };
// "cpu", "cuda".
const char* device_type_name(DeviceType type);

class Event {
 public:
  virtual ~Event() = default;
  // Whether the work recorded before it has run. Never blocks. Throws DeviceError with the
  // failed operation's message if any of that work failed.
  virtual bool done() = 0;
  // Blocks the host until done(); TimeoutError naming `what` at the deadline.
  virtual void synchronize(Clock::time_point deadline, const std::string& what) = 0;
};

// One piece of a batched copy.
struct CopyItem {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;
  // Every call below enqueues work and returns at once.
  // bytes from src to dst; either may be device or host memory of this device.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Every item in one launch: dst = src * factor, element-wise in dtype (factor 1: a plain copy,
  // any dtype). Items must not overlap one another.
  virtual void batched_copy(const std::vector<CopyItem>& items, DataType dtype, double factor) = 0;
  // inout[i] = op(inout[i], in[i]) for count elements (kAverage is not a reduction: use kSum and
  // scale).
  virtual void reduce(DataType dtype, ReduceOp op, const void* in, void* inout, size_t count) = 0;
  // out[i] = op over k of inputs[k][i] (input 0 first, so every caller gets the same bits), then
  // times factor; f16 and bf16 accumulate in f32 and round once. Inputs may be other processes'
  // memory opened with Device::open_shared, and out may be one of the inputs.
  virtual void reduce_many(DataType dtype, ReduceOp op, const std::vector<const void*>& inputs,
                           void* out, size_t count, double factor) = 0;
  // An event that completes when everything enqueued on this stream so far has run.
  virtual std::shared_ptr<Event> record() = 0;
  // Work enqueued after this waits for `event` (recorded on any stream of the same device).
  virtual void wait(const std::shared_ptr<Event>& event) = 0;
  // The cudaStream_t of a CUDA stream (for NCCL), nullptr for the others.
  virtual void* native_handle() { return nullptr; }
};

// Device memory that the other processes of this node may map (CUDA IPC; the fake device's
// POSIX shared memory): `handle` is what they pass to Device::open_shared.
struct SharedMemory {
  std::shared_ptr<void> memory;
  std::vector<char> handle;  // kSharedHandleBytes
};
constexpr size_t kSharedHandleBytes = 96;

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceType type() const = 0;
  virtual int index() const = 0;
  // "cuda:0", "cpu", "fake:0".
  virtual std::string name() const = 0;
  // Equal for two processes exactly when they use the same physical device: a GPU's PCI bus
  // id; "fake:<index>" for the fake device (so every rank's fake device 0 is one "GPU", as on
  // a one-GPU machine); "cpu" for the host.
  virtual std::string physical_id() const = 0;
  virtual std::unique_ptr<Stream> new_stream() = 0;
  // A stream someone else owns (a framework's current stream: a cudaStream_t for CUDA), so that
  // events are recorded on it and it waits on ours; the wrapper never destroys it. DeviceError
  // where the device has no native streams.
  virtual std::unique_ptr<Stream> wrap_stream(void* native);
  // Device memory of `bytes` (at least 256-byte aligned), freed when the last owner lets go
  // (after the work using it has run: the caller keeps it until then).
  virtual std::shared_ptr<void> allocate(size_t bytes) = 0;
  // Page-locked host memory for staging copies (plain host memory where that is the same).
  virtual std::shared_ptr<void> allocate_host(size_t bytes) = 0;
  // Whether allocate_shared and open_shared work here (the device IPC backend's condition).
  virtual bool shares_memory() const { return false; }
  // Device memory of `bytes` that other processes can open. DeviceError where it cannot.
  virtual SharedMemory allocate_shared(size_t bytes);
  // Another process's allocate_shared memory, usable by this device's streams until released.
  virtual std::shared_ptr<void> open_shared(const std::vector<char>& handle);
};

// The host as a device: synchronous, plain memory. One shared instance.
Device& host_device();

// Whether this build has the CUDA backend (TESSERA_CUDA at configure time).
bool cuda_built();
// GPUs visible to this process: 0 without a CUDA build, a driver or a GPU.
int cuda_device_count();
// Why cuda_device_count() is 0 ("built without CUDA (TESSERA_CUDA=OFF ...)", the driver's
// error), or "" when there are GPUs. Tests print it when they skip.
std::string cuda_unavailable_reason();
// GPU `index`. Throws DeviceError naming what is missing (a CUDA build, a driver, that GPU).
std::unique_ptr<Device> cuda_device(int index);

}  // namespace gpu
}  // namespace tessera
