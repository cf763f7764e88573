// TESSERA_CUDA_CHECK(call): throws tessera::DeviceError naming the call and CUDA's error string.
#pragma once

#include <cuda_runtime.h>

#include "common/error.h"

#define TESSERA_CUDA_CHECK(call)                                                   \
  do {                                                                             \
    const cudaError_t tessera_err_ = (call);                                       \
    if (tessera_err_ != cudaSuccess) {                                             \
      throw ::tessera::DeviceError(::tessera::detail::concat(                      \
          #call, " failed: ", cudaGetErrorString(tessera_err_), " (",              \
          cudaGetErrorName(tessera_err_), ")"));                                   \
    }                                                                              \
  } while (0)
