// The CUDA entry points of a build without CUDA: no GPUs, and a message that says how to get
// them.
#include "common/error.h"
#include "gpu/device.h"

namespace tessera {
namespace gpu {
namespace {
constexpr const char* kWhy =
    "tessera was built without CUDA (TESSERA_CUDA=OFF, or no nvcc found at configure time): "
    "reconfigure with -DTESSERA_CUDA=ON on a machine with the CUDA toolkit";
}

bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() { return kWhy; }
std::unique_ptr<Device> cuda_device(int index) {
  throw DeviceError(detail::concat("cuda:", index, " requested but ", kWhy));
}

}  // namespace gpu
}  // namespace tessera
