// The host implementations of the device operations, shared by the host device and the fake
// device (which runs them later, on its stream threads).
#pragma once

#include <memory>
#include <vector>

#include "gpu/device.h"

namespace tessera {
namespace gpu {

// InvalidArgument for a factor other than 1 on integer data (as the host's scale()).
void check_copy_factor(DataType dtype, double factor);
void host_batched_copy(const std::vector<CopyItem>& items, DataType dtype, double factor);
// Throws InvalidArgument for kAverage.
void host_reduce(DataType dtype, ReduceOp op, const void* in, void* inout, size_t count);
// Stream::reduce_many on host memory. Throws InvalidArgument for kAverage.
void host_reduce_many(DataType dtype, ReduceOp op, const std::vector<const void*>& inputs,
                      void* out, size_t count, double factor);
// 256-byte aligned, freed with the last owner. Throws DeviceError when out of memory.
std::shared_ptr<void> host_allocate(size_t bytes);

}  // namespace gpu
}  // namespace tessera
