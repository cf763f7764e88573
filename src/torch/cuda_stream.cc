// current_stream with a CUDA build of libtorch: c10's current stream of the GPU, wrapped (not
// owned) so that the engine's events are recorded on it and waited on by it.
#include <c10/cuda/CUDAStream.h>

#include "torch/device_tensors.h"

namespace tessera {
namespace detail {

std::shared_ptr<gpu::Stream> current_stream(gpu::Device& device) {
  const c10::DeviceIndex index = static_cast<c10::DeviceIndex>(device.index());
  return device.wrap_stream(c10::cuda::getCurrentCUDAStream(index).stream());
}

}  // namespace detail
}  // namespace tessera
