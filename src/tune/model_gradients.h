// Gradient sizes of ResNet-50 without building it (no libtorch): for the benchmarks of the
// collectives, whose fusion figure is "ResNet-50's 161 gradients in one batched copy". A test
// holds it to the built model's parameters (tests/unit_torch).
#pragma once

#include <cstddef>
#include <vector>

namespace tessera {
namespace tune {

// Elements of ResNet-50's parameters (1000 classes) in the model's parameter order: the stem,
// then each bottleneck's three convolutions and batch norms (and the first block's downsample),
// then the classifier. 161 tensors, 25,557,032 elements.
std::vector<size_t> resnet50_parameter_elements();

}  // namespace tune
}  // namespace tessera
