// The CUDA device: RAII streams and events over the runtime API, kernels from kernels.cu.
// Built only with TESSERA_CUDA (no_cuda.cc stands in otherwise).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "gpu/cuda_check.h"
#include "gpu/device.h"
#include "gpu/host_ops.h"
#include "gpu/kernels.h"

namespace tessera {
namespace gpu {
namespace {

// DeviceScope for deleters, which must not throw: errors are ignored (at exit the driver may be
// gone already).
template <class F>
void quietly_on(int index, F f) {
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  if (previous != index) cudaSetDevice(index);
  f();
  if (previous >= 0 && previous != index) cudaSetDevice(previous);
}

class CudaEvent : public Event {
 public:
  CudaEvent(int device, cudaStream_t stream) : device_(device) {
    const DeviceScope on(device);
    TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    TESSERA_CUDA_CHECK(cudaEventRecord(event_, stream));
  }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  bool done() override {
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) return false;
    TESSERA_CUDA_CHECK(e);
    return true;
  }
  // Polls rather than cudaEventSynchronize, which has no deadline.
  void synchronize(Clock::time_point deadline, const std::string& what) override {
    auto pause = std::chrono::microseconds(1);
    while (!done()) {
      if (Clock::now() > deadline) {
        throw TimeoutError(detail::concat("timed out waiting for ", what, " on cuda:", device_));
      }
      std::this_thread::sleep_for(pause);
      if (pause < std::chrono::microseconds(200)) pause *= 2;
    }
  }
  cudaEvent_t get() const { return event_; }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

class CudaStream : public Stream {
 public:
  explicit CudaStream(int device) : device_(device) {
    const DeviceScope on(device);
    TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  // Someone else's stream (Device::wrap_stream): used, never destroyed.
  CudaStream(int device, cudaStream_t theirs) : device_(device), stream_(theirs), owned_(false) {}
  ~CudaStream() override {
    if (owned_) cudaStreamDestroy(stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    const DeviceScope on(device_);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  }
  void batched_copy(const std::vector<CopyItem>& items, DataType dtype, double factor) override {
    check_copy_factor(dtype, factor);
    const DeviceScope on(device_);
    for (size_t i = 0; i < items.size(); i += kBatchedCopyItems) {
      const size_t n = std::min(kBatchedCopyItems, items.size() - i);
      launch_batched_copy(items.data() + i, n, dtype, factor, stream_);
    }
  }
  void reduce(DataType dtype, ReduceOp op, const void* in, void* inout, size_t count) override {
    TESSERA_CHECK(op != ReduceOp::kAverage,
                  "a device reduction takes sum, min, max, prod, band or bor, not average");
    const DeviceScope on(device_);
    launch_reduce(dtype, op, in, inout, count, stream_);
  }
  // More inputs than one launch takes: the groups accumulate in a scratch buffer (not in `out`,
  // which may be a later group's input). cudaFree waits for the work using it.
  void reduce_many(DataType dtype, ReduceOp op, const std::vector<const void*>& inputs, void* out,
                   size_t count, double factor) override {
    TESSERA_CHECK(op != ReduceOp::kAverage,
                  "a device reduction takes sum, min, max, prod, band or bor, not average");
    TESSERA_CHECK(!inputs.empty(), "reduce_many needs at least one input");
    check_copy_factor(dtype, factor);
    const DeviceScope on(device_);
    const size_t n = inputs.size(), k = static_cast<size_t>(kMaxReduceInputs);
    if (n <= k) {
      return launch_reduce_many(dtype, op, inputs.data(), static_cast<int>(n), out, count, factor,
                                stream_);
    }
    void* acc = nullptr;
    TESSERA_CUDA_CHECK(cudaMalloc(&acc, std::max<size_t>(count * dtype_size(dtype), 256)));
    std::shared_ptr<void> scratch(acc, [](void* q) { cudaFree(q); });
    launch_reduce_many(dtype, op, inputs.data(), static_cast<int>(k), acc, count, 1.0, stream_);
    for (size_t i = k; i < n; i += k - 1) {
      std::vector<const void*> group{acc};
      group.insert(group.end(), inputs.begin() + static_cast<long>(i),
                   inputs.begin() + static_cast<long>(std::min(n, i + k - 1)));
      const bool last = i + k - 1 >= n;
      launch_reduce_many(dtype, op, group.data(), static_cast<int>(group.size()), last ? out : acc,
                         count, last ? factor : 1.0, stream_);
    }
  }
  std::shared_ptr<Event> record() override { return std::make_shared<CudaEvent>(device_, stream_); }
  void wait(const std::shared_ptr<Event>& event) override {
    auto* cuda = dynamic_cast<CudaEvent*>(event.get());
    TESSERA_CHECK(cuda != nullptr, "a CUDA stream can only wait on a CUDA event");
    const DeviceScope on(device_);
    TESSERA_CUDA_CHECK(cudaStreamWaitEvent(stream_, cuda->get(), 0));
  }
  void* native_handle() override { return stream_; }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  bool owned_ = true;
};

class CudaDevice : public Device {
 public:
  explicit CudaDevice(int index) : index_(index) { const DeviceScope on(index); }
  DeviceType type() const override { return DeviceType::kCuda; }
  int index() const override { return index_; }
  std::string name() const override { return detail::concat("cuda:", index_); }
  std::string physical_id() const override {
    char bus[64] = {};
    TESSERA_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), index_));
    return bus;
  }
  std::unique_ptr<Stream> new_stream() override { return std::make_unique<CudaStream>(index_); }
  std::unique_ptr<Stream> wrap_stream(void* native) override {
    return std::make_unique<CudaStream>(index_, static_cast<cudaStream_t>(native));
  }
  std::shared_ptr<void> allocate(size_t bytes) override {
    const DeviceScope on(index_);
    void* p = nullptr;
    TESSERA_CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 256 : bytes));
    const int index = index_;
    return std::shared_ptr<void>(p, [index](void* q) { quietly_on(index, [q] { cudaFree(q); }); });
  }
  std::shared_ptr<void> allocate_host(size_t bytes) override {
    void* p = nullptr;
    TESSERA_CUDA_CHECK(cudaMallocHost(&p, bytes == 0 ? 256 : bytes));
    return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
  }
  bool shares_memory() const override { return true; }
  // The handle: cudaIpcMemHandle_t, then the size.
  SharedMemory allocate_shared(size_t bytes) override {
    static_assert(sizeof(cudaIpcMemHandle_t) + sizeof(uint64_t) <= kSharedHandleBytes, "");
    SharedMemory m;
    m.memory = allocate(bytes);
    cudaIpcMemHandle_t h;
    TESSERA_CUDA_CHECK(cudaIpcGetMemHandle(&h, m.memory.get()));
    m.handle.assign(kSharedHandleBytes, '\0');
    std::memcpy(m.handle.data(), &h, sizeof(h));
    const uint64_t size = bytes;
    std::memcpy(m.handle.data() + sizeof(h), &size, sizeof(size));
    return m;
  }
  std::shared_ptr<void> open_shared(const std::vector<char>& handle) override {
    TESSERA_CHECK_EQ(handle.size(), kSharedHandleBytes, "a shared memory handle's size");
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.data(), sizeof(h));
    const DeviceScope on(index_);
    void* p = nullptr;
    TESSERA_CUDA_CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    const int index = index_;
    return std::shared_ptr<void>(
        p, [index](void* q) { quietly_on(index, [q] { cudaIpcCloseMemHandle(q); }); });
  }

 private:
  int index_;
};

}  // namespace

bool cuda_built() { return true; }

std::string cuda_unavailable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    return detail::concat("no usable GPU: ", cudaGetErrorString(e), " (", cudaGetErrorName(e), ")");
  }
  return n == 0 ? "no GPU visible to this process" : "";
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clears the error, so a later call starts clean
    return 0;
  }
  return n;
}

std::unique_ptr<Device> cuda_device(int index) {
  const int n = cuda_device_count();
  if (n == 0)
    throw DeviceError(detail::concat("cuda:", index, " requested but ", cuda_unavailable_reason()));
  if (index < 0 || index >= n) {
    throw DeviceError(detail::concat("cuda:", index, " requested but this process sees ", n,
                                     " GPU(s): cuda:0 to cuda:", n - 1));
  }
  return std::make_unique<CudaDevice>(index);
}

}  // namespace gpu
}  // namespace tessera
