// current_stream without a CUDA build of libtorch: a CUDA tensor cannot exist there, but the
// message says what would make one work.
#include "common/error.h"
#include "torch/device_tensors.h"

namespace tessera {
namespace detail {

std::shared_ptr<gpu::Stream> current_stream(gpu::Device& device) {
  throw InvalidArgument(
      concat("a tensor on ", device.name(),
             ": this tessera was built against a libtorch without CUDA; build it against a "
             "CUDA libtorch (PyTorch from pip, scripts/build_with_pip_torch.sh) for CUDA tensors"));
}

}  // namespace detail
}  // namespace tessera
