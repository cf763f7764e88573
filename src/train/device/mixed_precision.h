// --precision: the dtype of the master weights and the dtype autocast computes in, and the loss
// scaling that f16 needs (train/device/loss_scale.h).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "train/device/loss_scale.h"

namespace tessera {
namespace train {

struct Precision {
  torch::ScalarType master = torch::kFloat;   // parameters, gradients, optimizer state, loss
  torch::ScalarType compute = torch::kFloat;  // autocast's (kFloat, kDouble: autocast off)
  bool loss_scaled = false;                   // f16: dynamic loss scaling
};

// f32, f64 (exact comparisons), bf16 (autocast, f32 master weights), f16 (the same, with
// dynamic loss scaling); InvalidArgument listing them.
Precision parse_precision(const std::string& name);

// After backward of loss x scaler.scale() and the gradients' allreduce, which leaves them
// bitwise equal on every rank (an inf or a NaN included: the sum carries it everywhere): when a
// gradient is not finite, zeros them all, backs the scale off and returns false (skip the
// step); otherwise divides them by the scale (exact: a power of two) and returns true. So every
// rank decides alike without a message of its own. Throws as LossScaler::update does.
bool unscale_or_skip(const std::vector<torch::Tensor>& params, LossScaler& scaler);

}  // namespace train
}  // namespace tessera
