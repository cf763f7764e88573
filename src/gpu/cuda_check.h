// TESSERA_CUDA_CHECK(call): throws tessera::DeviceError naming the call and CUDA's error string.
#pragma once

#include <cuda_runtime.h>

#include "common/error.h"

#define TESSERA_CUDA_CHECK(call)                                                                \
  do {                                                                                          \
    const cudaError_t tessera_err_ = (call);                                                    \
    if (tessera_err_ != cudaSuccess) {                                                          \
      throw ::tessera::DeviceError(                                                             \
          ::tessera::detail::concat(#call, " failed: ", cudaGetErrorString(tessera_err_), " (", \
                                    cudaGetErrorName(tessera_err_), ")"));                      \
    }                                                                                           \
  } while (0)

namespace tessera {
namespace gpu {

// Makes GPU `index` current on this thread for the scope, and the caller's device current again
// after: the runtime API's device is per thread, and a user's or autograd's thread must find
// its own device unchanged after a call into tessera (as c10's device guard does for PyTorch).
class DeviceScope {
 public:
  explicit DeviceScope(int index) : index_(index) {
    TESSERA_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != index_) TESSERA_CUDA_CHECK(cudaSetDevice(index_));
  }
  ~DeviceScope() {
    if (previous_ != index_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int index_;
  int previous_ = 0;
};

}  // namespace gpu
}  // namespace tessera
