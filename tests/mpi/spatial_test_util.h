// Shared by the spatial tests: two copies of a model in f64 with the same parameters, one to run
// on the whole image (the reference) and one to run tile by tile, and the device they run on.
#pragma once

#include <torch/torch.h>

#include <cstdlib>
#include <utility>

namespace tessera {
namespace testing {

// The CPU, or TESSERA_TEST_TRAIN_DEVICE (scripts/gpu_check.sh sets cuda: the halos of GPU tiles
// then travel through host memory, and the reference runs on the GPU too).
inline torch::Device spatial_test_device() {
  const char* d = std::getenv("TESSERA_TEST_TRAIN_DEVICE");
  return torch::Device(d != nullptr && *d != '\0' ? d : "cpu");
}

// Model is a TORCH_MODULE holder (models::ResNet, models::DeepLabV3Plus) built from Options.
template <typename Model, typename Options>
std::pair<Model, Model> twin_models(const Options& options, uint64_t seed,
                                    torch::ScalarType dtype = torch::kDouble) {
  torch::manual_seed(seed);
  Model full(options), tiled(options);
  full->to(dtype);
  tiled->to(dtype);
  torch::NoGradGuard no_grad;
  auto b = tiled->named_parameters();
  for (const auto& item : full->named_parameters()) b[item.key()].copy_(item.value());
  return {full, tiled};
}

}  // namespace testing
}  // namespace tessera
