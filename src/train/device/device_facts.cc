// What this process can train on: tessera's GPU backend (TESSERA_CUDA), a libtorch with CUDA
// (TESSERA_TORCH_CUDA, set by CMake when TorchConfig lists CUDA libraries) and the GPUs libtorch
// sees.
#include <torch/torch.h>

#include "tessera/torch.h"
#include "train/device/device_choice.h"

namespace tessera {
namespace train {

DeviceFacts this_process_device_facts() {
  DeviceFacts f;
  if (!cuda_built()) {
    f.build_missing =
        "tessera was built without its GPU backend (TESSERA_CUDA=OFF, or no nvcc "
        "when it was configured: install the CUDA toolkit and set TESSERA_CUDA=ON)";
  }
#ifndef TESSERA_TORCH_CUDA
  if (f.build_missing.empty()) {
    f.build_missing =
        "the libtorch tessera was built against has no CUDA (Debian's is CPU only: "
        "build against PyTorch's, scripts/build_with_pip_torch.sh)";
  }
#endif
  if (!f.build_missing.empty()) return f;
  f.device_count = static_cast<int>(torch::cuda::device_count());
  f.unavailable_reason = cuda_unavailable_reason();
  if (f.device_count == 0 && f.unavailable_reason.empty()) {
    f.unavailable_reason = "libtorch sees no GPU";
  }
  return f;
}

}  // namespace train
}  // namespace tessera
