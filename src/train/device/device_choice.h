// Which device a rank trains on (`--device`), chosen from what this process sees (pure).
//
//   cpu          the host
//   cuda         GPU local_rank % (GPUs visible), as Horovod and DDP place one rank per GPU
//   cuda:I,J,..  GPU list[local_rank % list size] (a subset, or an order, of the visible GPUs)
//   auto         cuda where this build has CUDA and a GPU is visible, else cpu
//
// A choice that cannot be honoured is an InvalidArgument that says what is missing (a CUDA
// build, a GPU, that index) and what would work.
#pragma once

#include <string>

namespace tessera {
namespace train {

struct DeviceChoice {
  bool cuda = false;
  int index = 0;  // the GPU (cuda only)
  // "cpu", "cuda:3".
  std::string name() const;
};

// What this process can see: whether the build can train on GPUs, the visible GPUs and, when
// there are none, why.
struct DeviceFacts {
  std::string build_missing;  // "" when it can; else what the build lacks
  int device_count = 0;
  std::string unavailable_reason;  // gpu::cuda_unavailable_reason()
};

DeviceChoice choose_device(const std::string& spec, int local_rank, const DeviceFacts& facts);

// This process's facts: tessera's GPU backend, a libtorch with CUDA, and the GPUs it sees
// (device_facts.cc).
DeviceFacts this_process_device_facts();

}  // namespace train
}  // namespace tessera
