#include "train/device/run_device.h"

#include "common/error.h"
#include "tessera/torch.h"
#include "train/device/device_choice.h"

namespace tessera {
namespace train {

torch::Device agreed_device(const std::string& spec, bool dist) {
  std::string refused;
  DeviceChoice where;
  try {
    where = choose_device(spec, dist ? local_rank() : 0, this_process_device_facts());
  } catch (const InvalidArgument& e) {
    refused = e.what();
  }
  if (dist) {
    const std::string kind = where.cuda ? "cuda" : "cpu";  // GPU indices may differ by rank
    verify_across_ranks("the training device",
                        "device: " + (refused.empty() ? kind : refused) + "\n");
  }
  if (!refused.empty()) throw InvalidArgument(refused);
  if (!where.cuda) return torch::kCPU;
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(where.index));
}

void synchronize_device(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

#ifndef TESSERA_TORCH_CUDA
double peak_device_memory_gib(const torch::Device&) { return 0; }
#endif

}  // namespace train
}  // namespace tessera
