// tessera's CUDA kernels: the batched fusion copy (with the scale factor folded in) and the
// element-wise reductions of the device collectives. Half types compute in f32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/cuda_check.h"
#include "gpu/kernels.h"

namespace tessera {
namespace gpu {
namespace {

struct CopyBatch {
  CopyItem items[kBatchedCopyItems];
};

// Conversions through f32 for the half types; the identity for the others.
template <typename T>
__device__ float to_f(T v) {
  return static_cast<float>(v);
}
template <>
__device__ float to_f(__half v) {
  return __half2float(v);
}
template <>
__device__ float to_f(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T>
__device__ T from_f(float v) {
  return static_cast<T>(v);
}
template <>
__device__ __half from_f(float v) {
  return __float2half(v);
}
template <>
__device__ __nv_bfloat16 from_f(float v) {
  return __float2bfloat16(v);
}

// The arithmetic type of T: f32 for halves, T itself otherwise.
template <typename T>
struct Acc {
  using type = T;
};
template <>
struct Acc<__half> {
  using type = float;
};
template <>
struct Acc<__nv_bfloat16> {
  using type = float;
};

template <typename T>
__device__ typename Acc<T>::type load(const T* p, size_t i) {
  if constexpr (std::is_same<typename Acc<T>::type, float>::value &&
                !std::is_same<T, float>::value) {
    return to_f(p[i]);
  } else {
    return p[i];
  }
}
template <typename T>
__device__ void store(T* p, size_t i, typename Acc<T>::type v) {
  if constexpr (std::is_same<typename Acc<T>::type, float>::value &&
                !std::is_same<T, float>::value) {
    p[i] = from_f<T>(v);
  } else {
    p[i] = v;
  }
}

// blockIdx.y picks the item; the blocks along x stride over its bytes (16 at a time where
// both ends and the length allow it).
__global__ void batched_copy_kernel(CopyBatch batch) {
  const CopyItem item = batch.items[blockIdx.y];
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const auto a = reinterpret_cast<uintptr_t>(item.src) | reinterpret_cast<uintptr_t>(item.dst) |
                 item.bytes;
  if ((a & 15) == 0) {
    const auto* s = static_cast<const uint4*>(item.src);
    auto* d = static_cast<uint4*>(item.dst);
    for (size_t i = first; i < item.bytes / 16; i += stride) d[i] = s[i];
  } else {
    const auto* s = static_cast<const unsigned char*>(item.src);
    auto* d = static_cast<unsigned char*>(item.dst);
    for (size_t i = first; i < item.bytes; i += stride) d[i] = s[i];
  }
}

template <typename T>
__global__ void batched_scale_kernel(CopyBatch batch, double factor) {
  const CopyItem item = batch.items[blockIdx.y];
  const auto* s = static_cast<const T*>(item.src);
  auto* d = static_cast<T*>(item.dst);
  const size_t n = item.bytes / sizeof(T);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  using A = typename Acc<T>::type;
  const A f = static_cast<A>(factor);
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    store(d, i, load(s, i) * f);
  }
}

template <typename A>
__device__ A apply(ReduceOp op, A a, A b) {
  switch (op) {
    case ReduceOp::kMin:
      return b < a ? b : a;
    case ReduceOp::kMax:
      return b > a ? b : a;
    case ReduceOp::kProduct:
      return a * b;
    case ReduceOp::kBitAnd:
      if constexpr (std::is_integral<A>::value) return a & b;
      return a;
    case ReduceOp::kBitOr:
      if constexpr (std::is_integral<A>::value) return a | b;
      return a;
    default:
      return a + b;
  }
}

template <typename T>
__global__ void reduce_kernel(ReduceOp op, const T* in, T* inout, size_t count) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    store(inout, i, apply(op, load(inout, i), load(in, i)));
  }
}

struct Inputs {
  const void* p[kMaxReduceInputs];
};

template <typename T>
__global__ void reduce_many_kernel(ReduceOp op, Inputs inputs, int n, T* out, size_t count,
                                   double factor) {
  using A = typename Acc<T>::type;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    A acc = load(static_cast<const T*>(inputs.p[0]), i);
    for (int k = 1; k < n; ++k) acc = apply(op, acc, load(static_cast<const T*>(inputs.p[k]), i));
    if (factor != 1.0) acc = acc * static_cast<A>(factor);
    store(out, i, acc);
  }
}

constexpr int kThreads = 256;

unsigned blocks_for(size_t elements, unsigned cap) {
  const size_t b = (elements + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b == 0 ? 1 : (b < cap ? b : cap));
}

// Calls f(T{}) with T the CUDA type of dtype.
template <typename F>
void dispatch(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kFloat32: return f(float{});
    case DataType::kFloat64: return f(double{});
    case DataType::kFloat16: return f(__half{});
    case DataType::kBFloat16: return f(__nv_bfloat16{});
    case DataType::kInt32: return f(int32_t{});
    case DataType::kInt64: return f(int64_t{});
    case DataType::kUInt8: return f(uint8_t{});
    case DataType::kInt8: return f(int8_t{});
    case DataType::kInt16: return f(int16_t{});
  }
}

}  // namespace

void launch_batched_copy(const CopyItem* items, size_t n, DataType dtype, double factor,
                         void* stream) {
  if (n == 0) return;
  CopyBatch batch{};
  size_t largest = 0;
  for (size_t i = 0; i < n; ++i) {
    batch.items[i] = items[i];
    if (items[i].bytes > largest) largest = items[i].bytes;
  }
  auto s = static_cast<cudaStream_t>(stream);
  const dim3 grid(blocks_for(largest / 16 + 1, 64), static_cast<unsigned>(n));
  if (factor == 1.0) {
    batched_copy_kernel<<<grid, kThreads, 0, s>>>(batch);
  } else {
    dispatch(dtype, [&](auto t) {
      using T = decltype(t);
      const dim3 g(blocks_for(largest / sizeof(T), 64), static_cast<unsigned>(n));
      batched_scale_kernel<T><<<g, kThreads, 0, s>>>(batch, factor);
    });
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void launch_reduce(DataType dtype, ReduceOp op, const void* in, void* inout, size_t count,
                   void* stream) {
  if (count == 0) return;
  dispatch(dtype, [&](auto t) {
    using T = decltype(t);
    reduce_kernel<T><<<blocks_for(count, 1024), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        op, static_cast<const T*>(in), static_cast<T*>(inout), count);
  });
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void launch_reduce_many(DataType dtype, ReduceOp op, const void* const* inputs, int n, void* out,
                        size_t count, double factor, void* stream) {
  if (count == 0) return;
  Inputs in{};
  for (int k = 0; k < n; ++k) in.p[k] = inputs[k];
  dispatch(dtype, [&](auto t) {
    using T = decltype(t);
    reduce_many_kernel<T>
        <<<blocks_for(count, 1024), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
            op, in, n, static_cast<T*>(out), count, factor);
  });
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace gpu
}  // namespace tessera
