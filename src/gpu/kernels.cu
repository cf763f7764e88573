// tessera's CUDA kernels: the batched fusion copy (with the scale factor folded in) and the
// element-wise reductions of the device collectives. Half types compute in f32. Each cuts its
// range as gpu/vector_plan.h says (16-byte vectors between a misaligned head and tail) and
// sizes its grid from the SM count, so that copies run near the memory bound.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "gpu/cuda_check.h"
#include "gpu/kernels.h"
#include "gpu/vector_plan.h"

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

// A 16-byte vector of T (the body of an element-wise range, gpu/vector_plan.h).
template <typename T>
struct alignas(16) Pack {
  static constexpr int kN = static_cast<int>(kVectorBytes / sizeof(T));
  T v[kN];
};

// Calls body(i) for i in [begin, end) with this thread's share, kUnroll indices at a time so
// that their loads are in flight together.
template <typename F>
__device__ void strided(size_t begin, size_t end, F&& body) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = begin + static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < end; i += kUnroll * stride) {
#pragma unroll
    for (unsigned u = 0; u < kUnroll; ++u) body(i + u * stride);
  }
  for (; i < end; i += stride) body(i);
}

// blockIdx.y picks the item; its misaligned head and tail bytes go one at a time, the body in
// 16-byte vectors (whole vectors loaded before any is stored, kUnroll per thread).
__global__ void batched_copy_kernel(CopyBatch batch) {
  const CopyItem item = batch.items[blockIdx.y];
  const auto s = reinterpret_cast<uintptr_t>(item.src);
  const auto d = reinterpret_cast<uintptr_t>(item.dst);
  const VectorSplit sp = vector_split(s, s ^ d, item.bytes, 1);
  const auto* sb = static_cast<const unsigned char*>(item.src);
  auto* db = static_cast<unsigned char*>(item.dst);
  strided(0, sp.head, [&](size_t i) { db[i] = sb[i]; });
  const auto* sv = reinterpret_cast<const uint4*>(sb + sp.head);
  auto* dv = reinterpret_cast<uint4*>(db + sp.head);
  const size_t vectors = sp.body / kVectorBytes;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < vectors; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (unsigned u = 0; u < kUnroll; ++u) v[u] = sv[i + u * stride];
#pragma unroll
    for (unsigned u = 0; u < kUnroll; ++u) dv[i + u * stride] = v[u];
  }
  for (; i < vectors; i += stride) dv[i] = sv[i];
  strided(sp.head + sp.body, item.bytes, [&](size_t k) { db[k] = sb[k]; });
}

template <typename T>
__global__ void batched_scale_kernel(CopyBatch batch, double factor) {
  const CopyItem item = batch.items[blockIdx.y];
  const auto* s = static_cast<const T*>(item.src);
  auto* d = static_cast<T*>(item.dst);
  const size_t n = item.bytes / sizeof(T);
  using A = typename Acc<T>::type;
  const A f = static_cast<A>(factor);
  const auto sa = reinterpret_cast<uintptr_t>(s);
  const VectorSplit sp = vector_split(sa, sa ^ reinterpret_cast<uintptr_t>(d), n, sizeof(T));
  auto scalar = [&](size_t i) { store(d, i, load(s, i) * f); };
  strided(0, sp.head, scalar);
  const auto* sv = reinterpret_cast<const Pack<T>*>(s + sp.head);
  auto* dv = reinterpret_cast<Pack<T>*>(d + sp.head);
  strided(0, sp.body / Pack<T>::kN, [&](size_t i) {
    Pack<T> p = sv[i];
#pragma unroll
    for (int k = 0; k < Pack<T>::kN; ++k) store(p.v, k, load(p.v, k) * f);
    dv[i] = p;
  });
  strided(sp.head + sp.body, n, scalar);
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
  const auto a = reinterpret_cast<uintptr_t>(in);
  const VectorSplit sp = vector_split(a, a ^ reinterpret_cast<uintptr_t>(inout), count, sizeof(T));
  auto scalar = [&](size_t i) { store(inout, i, apply(op, load(inout, i), load(in, i))); };
  strided(0, sp.head, scalar);
  const auto* iv = reinterpret_cast<const Pack<T>*>(in + sp.head);
  auto* ov = reinterpret_cast<Pack<T>*>(inout + sp.head);
  strided(0, sp.body / Pack<T>::kN, [&](size_t i) {
    const Pack<T> x = iv[i];
    Pack<T> y = ov[i];
#pragma unroll
    for (int k = 0; k < Pack<T>::kN; ++k) store(y.v, k, apply(op, load(y.v, k), load(x.v, k)));
    ov[i] = y;
  });
  strided(sp.head + sp.body, count, scalar);
}

struct Inputs {
  const void* p[kMaxReduceInputs];
};

// out = op over the inputs (input 0 first), times factor; the body in 16-byte vectors where
// every input and out share their alignment (fusion buffers and IPC chunks are planned so).
template <typename T>
__global__ void reduce_many_kernel(ReduceOp op, Inputs inputs, int n, T* out, size_t count,
                                   double factor) {
  using A = typename Acc<T>::type;
  const auto first = reinterpret_cast<uintptr_t>(inputs.p[0]);
  uintptr_t mask = first ^ reinterpret_cast<uintptr_t>(out);
  for (int k = 1; k < n; ++k) mask |= first ^ reinterpret_cast<uintptr_t>(inputs.p[k]);
  const VectorSplit sp = vector_split(first, mask, count, sizeof(T));
  auto in = [&](int k) { return static_cast<const T*>(inputs.p[k]); };
  auto scalar = [&](size_t i) {
    A acc = load(in(0), i);
    for (int k = 1; k < n; ++k) acc = apply(op, acc, load(in(k), i));
    if (factor != 1.0) acc = acc * static_cast<A>(factor);
    store(out, i, acc);
  };
  strided(0, sp.head, scalar);
  const size_t packs = sp.body / Pack<T>::kN;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < packs;
       i += stride) {
    A acc[Pack<T>::kN];
    const Pack<T> p0 = reinterpret_cast<const Pack<T>*>(in(0) + sp.head)[i];
#pragma unroll
    for (int e = 0; e < Pack<T>::kN; ++e) acc[e] = load(p0.v, e);
    for (int k = 1; k < n; ++k) {
      const Pack<T> pk = reinterpret_cast<const Pack<T>*>(in(k) + sp.head)[i];
#pragma unroll
      for (int e = 0; e < Pack<T>::kN; ++e) acc[e] = apply(op, acc[e], load(pk.v, e));
    }
    Pack<T> o;
#pragma unroll
    for (int e = 0; e < Pack<T>::kN; ++e) {
      store(o.v, e, factor != 1.0 ? acc[e] * static_cast<A>(factor) : acc[e]);
    }
    reinterpret_cast<Pack<T>*>(out + sp.head)[i] = o;
  }
  strided(sp.head + sp.body, count, scalar);
}

// The SMs of the current device (the callers' DeviceScope made it current), asked once per
// device.
int sm_count() {
  static std::atomic<int> cached[64] = {};
  int device = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= 64) device = 0;
  int n = cached[device].load(std::memory_order_relaxed);
  if (n == 0) {
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    cached[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

// Calls f(T{}) with T the CUDA type of dtype.
template <typename F>
void dispatch(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kFloat32:
      return f(float{});
    case DataType::kFloat64:
      return f(double{});
    case DataType::kFloat16:
      return f(__half{});
    case DataType::kBFloat16:
      return f(__nv_bfloat16{});
    case DataType::kInt32:
      return f(int32_t{});
    case DataType::kInt64:
      return f(int64_t{});
    case DataType::kUInt8:
      return f(uint8_t{});
    case DataType::kInt8:
      return f(int8_t{});
    case DataType::kInt16:
      return f(int16_t{});
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
  const int sms = sm_count();
  if (factor == 1.0) {
    const dim3 grid(grid_blocks(largest / kVectorBytes + 1, n, sms), static_cast<unsigned>(n));
    batched_copy_kernel<<<grid, kThreadsPerBlock, 0, s>>>(batch);
  } else {
    dispatch(dtype, [&](auto t) {
      using T = decltype(t);
      const dim3 g(grid_blocks(largest / kVectorBytes + 1, n, sms), static_cast<unsigned>(n));
      batched_scale_kernel<T><<<g, kThreadsPerBlock, 0, s>>>(batch, factor);
    });
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void launch_reduce(DataType dtype, ReduceOp op, const void* in, void* inout, size_t count,
                   void* stream) {
  if (count == 0) return;
  const unsigned blocks = grid_blocks(count * dtype_size(dtype) / kVectorBytes + 1, 1, sm_count());
  dispatch(dtype, [&](auto t) {
    using T = decltype(t);
    reduce_kernel<T><<<blocks, kThreadsPerBlock, 0, static_cast<cudaStream_t>(stream)>>>(
        op, static_cast<const T*>(in), static_cast<T*>(inout), count);
  });
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void launch_reduce_many(DataType dtype, ReduceOp op, const void* const* inputs, int n, void* out,
                        size_t count, double factor, void* stream) {
  if (count == 0) return;
  Inputs in{};
  for (int k = 0; k < n; ++k) in.p[k] = inputs[k];
  const unsigned blocks = grid_blocks(count * dtype_size(dtype) / kVectorBytes + 1, 1, sm_count());
  dispatch(dtype, [&](auto t) {
    using T = decltype(t);
    reduce_many_kernel<T><<<blocks, kThreadsPerBlock, 0, static_cast<cudaStream_t>(stream)>>>(
        op, in, n, static_cast<T*>(out), count, factor);
  });
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace gpu
}  // namespace tessera
