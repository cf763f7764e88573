// Internal to src/torch (and the trainer's checkpoints): an optimizer's whole state in a
// libtorch archive. libtorch 1.13's Optimizer::load restores the per-parameter state but not
// the param groups' options (learning rate, momentum, ...), so those travel beside it.
#pragma once

#include <torch/torch.h>

namespace tessera {
namespace detail {

void save_optimizer(const torch::optim::Optimizer& optimizer,
                    torch::serialize::OutputArchive& archive);
// The optimizer must be over the same parameters, in the same groups, as the saved one.
void load_optimizer(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive);

}  // namespace detail
}  // namespace tessera
