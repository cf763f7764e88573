// Launchers of tessera's CUDA kernels (kernels.cu). Plain C++ types only, so that .cc files
// include this without CUDA's headers; `stream` is a cudaStream_t.
#pragma once

#include <cstddef>

#include "common/dtype.h"
#include "gpu/device.h"

namespace tessera {
namespace gpu {

// Items per launch of the batched copy: their descriptors travel as one kernel argument, which
// CUDA limits to 4 KiB on every driver (24 bytes each).
constexpr size_t kBatchedCopyItems = 160;

// dst = src * factor for up to kBatchedCopyItems items, one launch. factor 1 copies bytes.
void launch_batched_copy(const CopyItem* items, size_t n, DataType dtype, double factor,
                         void* stream);
// inout = op(inout, in), element-wise; f16 and bf16 computed in f32.
void launch_reduce(DataType dtype, ReduceOp op, const void* in, void* inout, size_t count,
                   void* stream);
// out = op over the `n` inputs (device pointers, some of them other processes' buffers opened
// through CUDA IPC), element-wise, in a fixed order (input 0 first) so every rank gets the same
// bits. At most kMaxReduceInputs inputs.
constexpr int kMaxReduceInputs = 16;
void launch_reduce_many(DataType dtype, ReduceOp op, const void* const* inputs, int n, void* out,
                        size_t count, double factor, void* stream);

}  // namespace gpu
}  // namespace tessera
