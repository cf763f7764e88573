// Internal to src/torch: how a collective on a CUDA tensor reaches the engine's device path.
//
// A CUDA tensor's collective is enqueued with this rank's device (one per process, created at
// the first CUDA tensor and given to the engine), an event recorded on the caller's current
// stream as its readiness (the engine's stream waits on it, never the host), and the tensors as
// keep_alive (the caller may drop them at once). When the handle is done, the caller's current
// stream waits on the completion event before anything it enqueues later reads the result.
//
// Where the current stream comes from needs libtorch's CUDA headers: cuda_stream.cc with a CUDA
// libtorch, no_cuda_stream.cc (an error saying so) otherwise.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "gpu/device.h"

namespace tessera {
namespace detail {

// The device side of one call: no device for a CPU tensor.
struct DeviceUse {
  gpu::Device* device = nullptr;
  std::shared_ptr<gpu::Stream> stream;  // the caller's current stream on it
  // Whether the result's consumers run on the host, so synchronize() waits there for the device
  // work: the stand-in device's CPU tensors (libtorch's CPU operations are not ordered on a
  // stream). CUDA tensors' consumers are ordered on the caller's stream, which waits instead.
  bool host_consumers = false;
  explicit operator bool() const { return device != nullptr; }
};

// `t`'s device (null for a CPU tensor), checked to be this rank's: a rank uses one GPU, the one
// of its first CUDA tensor; a tensor on another GPU is an InvalidArgument naming both.
DeviceUse device_use(const torch::Tensor& t, const std::string& what);
// Several tensors of one call: all on the same device (or all CPU).
DeviceUse device_use(const std::vector<torch::Tensor>& ts, const std::string& what);
// Sets r's device, its readiness (an event recorded now on the caller's stream) and keeps
// `tensors` alive in it. Nothing for a CPU tensor.
void attach(engine::Request& r, const DeviceUse& use, const std::vector<torch::Tensor>& tensors);
// After the handle is done: the caller's stream waits on its completion.
void consume(const engine::Handle& h, const DeviceUse& use);
// An allgather's device result as a tensor of `shape` like `like`, owning the memory (no copy).
torch::Tensor device_result_tensor(const engine::Handle& h, const torch::Tensor& like);

// The caller's current stream on `device` (CUDA: libtorch's current stream of that GPU).
std::shared_ptr<gpu::Stream> current_stream(gpu::Device& device);

// Tests without a GPU: CPU tensors go through the device path on `device` (a FakeDevice, whose
// memory is host memory), with `current()` as the caller's stream. nullptr: back to normal.
// Call before init() or after shutdown() (the engine keeps the device it was given).
void set_stand_in_device(gpu::Device* device,
                         std::function<std::shared_ptr<gpu::Stream>()> current = {});
// Tests: the stand-in's consumers as CUDA's, ordered on the caller's stream (default: on the host).
void set_stand_in_stream_ordered(bool ordered);

}  // namespace detail
}  // namespace tessera
