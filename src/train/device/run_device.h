// The device a run trains on (`--device`, train/device/device_choice.h), agreed between its ranks.
#pragma once

#include <torch/torch.h>

#include <string>

namespace tessera {
namespace train {

// This rank's device for `spec`. With `dist`, collective: a spec refused on some ranks only (a
// node without GPUs), or cuda on some and cpu on others (auto on mixed nodes), is an
// InvalidArgument on every rank naming the ranks, not a hang; refused everywhere, each rank
// throws its reason.
torch::Device agreed_device(const std::string& spec, bool dist);

// Waits for the device's queued work (CUDA; nothing on the CPU): timing a step.
void synchronize_device(const torch::Device& device);

// The most memory this process's tensors held at once on `device` (GiB, CUDA's caching
// allocator: device_memory_cuda.cc); 0 on the CPU, whose figure is the resident set.
double peak_device_memory_gib(const torch::Device& device);

}  // namespace train
}  // namespace tessera
