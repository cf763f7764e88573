#include "train/device/mixed_precision.h"

#include "common/error.h"

namespace tessera {
namespace train {

Precision parse_precision(const std::string& name) {
  Precision p;
  if (name == "f32") return p;
  if (name == "f64") {
    p.master = p.compute = torch::kDouble;
    return p;
  }
  if (name == "bf16") {
    p.compute = torch::kBFloat16;
    return p;
  }
  TESSERA_CHECK(name == "f16", "--precision '", name,
                "' is not supported; accepted: f32, f64, bf16, f16");
  p.compute = torch::kHalf;
  p.loss_scaled = true;
  return p;
}

bool unscale_or_skip(const std::vector<torch::Tensor>& params, LossScaler& scaler) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> finite;
  for (const torch::Tensor& p : params) {
    if (p.grad().defined()) finite.push_back(torch::isfinite(p.grad()).all());
  }
  const bool overflow = !finite.empty() && !torch::stack(finite).all().item<bool>();
  const double scale = scaler.scale();
  if (!scaler.update(overflow)) {
    for (const torch::Tensor& p : params) {
      if (p.grad().defined()) p.grad().zero_();
    }
    return false;
  }
  for (const torch::Tensor& p : params) {
    if (p.grad().defined()) p.grad().mul_(1.0 / scale);
  }
  return true;
}

}  // namespace train
}  // namespace tessera
