// peak_device_memory_gib where libtorch has CUDA (built with TORCH_CUDA_LIBRARIES only).
#include <c10/cuda/CUDACachingAllocator.h>

#include "train/device/run_device.h"

namespace tessera {
namespace train {

double peak_device_memory_gib(const torch::Device& device) {
  if (!device.is_cuda()) return 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  // Index 0 of each statistic is the aggregate over allocation pools (StatType::AGGREGATE).
  return static_cast<double>(stats.allocated_bytes[0].peak) / (1024.0 * 1024.0 * 1024.0);
}

}  // namespace train
}  // namespace tessera
