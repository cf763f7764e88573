// Mixed precision: a scope in which libtorch's autocast runs the ops that gain from it
// (convolutions, matrix products) in a lower precision on one device type, while parameters,
// reductions and the loss stay f32 (master weights). libtorch's API moved in 2.4: this file
// holds both spellings so that the trainer need not.
#pragma once

#include <torch/torch.h>

namespace tessera {
namespace train {

class AutocastScope {
 public:
  // dtype kBFloat16 or kHalf on `device`'s type; kFloat or kDouble: autocast stays off.
  AutocastScope(const torch::Device& device, torch::ScalarType dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool on_ = false;
  bool cuda_ = false;
  bool was_enabled_ = false;
  torch::ScalarType was_dtype_ = torch::kFloat;
};

}  // namespace train
}  // namespace tessera
