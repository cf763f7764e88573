#include "torch/batch_norm_math.h"

#include <vector>

#include "common/error.h"

namespace tessera {
namespace batch_norm {
namespace {

std::vector<int64_t> reduce_dims(const torch::Tensor& x) {
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// [1, C, 1, 1...] view of a per-channel vector, for broadcasting against x.
torch::Tensor per_channel(const torch::Tensor& v, const torch::Tensor& x) {
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = v.size(0);
  return v.view(shape);
}

bool given(const torch::Tensor& t) { return t.defined() && t.numel() > 0; }

}  // namespace

torch::Tensor local_sums(const torch::Tensor& x, torch::ScalarType acc) {
  TESSERA_CHECK(x.dim() >= 2, "batch normalisation needs input [N, C, ...], got ", x.sizes());
  const auto dims = reduce_dims(x);
  const torch::Tensor xa = x.to(acc);
  const double count = static_cast<double>(x.numel() / x.size(1));
  return torch::cat({xa.sum(dims), (xa * xa).sum(dims), torch::full({1}, count, xa.options())});
}

Stats stats_of(const torch::Tensor& sums, double eps, const std::string& what) {
  const int64_t c = (sums.size(0) - 1) / 2;
  return stats_of(sums, sums[2 * c].item<double>(), eps, what);
}

Stats stats_of(const torch::Tensor& sums, double count, double eps, const std::string& what) {
  const int64_t c = (sums.size(0) - 1) / 2;
  Stats s;
  s.count = count;
  TESSERA_CHECK(s.count > 1, what, ": ", s.count,
                " value(s) per channel over all parts; training needs more than 1");
  s.mean = sums.narrow(0, 0, c) / s.count;
  s.var = (sums.narrow(0, c, c) / s.count - s.mean * s.mean).clamp_min(0);
  s.invstd = (s.var + eps).rsqrt();
  return s;
}

torch::Tensor normalize(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias, const Stats& s, double eps) {
  const auto t = x.scalar_type();
  return torch::batch_norm(x, given(weight) ? weight : torch::Tensor(),
                           given(bias) ? bias : torch::Tensor(), s.mean.to(t), s.var.to(t),
                           /*training=*/false, 0.0, eps, /*cudnn_enabled=*/false);
}

torch::Tensor local_grad_sums(const torch::Tensor& dy, const torch::Tensor& x,
                              const torch::Tensor& mean) {
  // batch_norm's backward kernel with invstd 1 returns sum dy (x - mean) as the weight's
  // gradient and sum dy as the bias's.
  const torch::Tensor ones = torch::ones_like(mean);
  const auto g = torch::native_batch_norm_backward(dy.contiguous(), x, ones, {}, {}, mean, ones,
                                                   true, 0.0, {false, true, true});
  return torch::cat({std::get<2>(g), std::get<1>(g)});
}

torch::Tensor input_grad(const torch::Tensor& dy, const torch::Tensor& x,
                         const torch::Tensor& weight, const torch::Tensor& mean,
                         const torch::Tensor& invstd, const torch::Tensor& grad_sums,
                         double count) {
  const int64_t c = x.size(1);
  const torch::Tensor mean_dy = grad_sums.narrow(0, 0, c) / count;
  const torch::Tensor mean_dy_xmu = grad_sums.narrow(0, c, c) / count;
  // dx = dy * k + x * m + b per channel.
  const torch::Tensor k = given(weight) ? weight * invstd : invstd;
  const torch::Tensor m = -k * invstd * invstd * mean_dy_xmu;
  const torch::Tensor b = -k * mean_dy - m * mean;
  // x * m + b through batch_norm's inference kernel (mean 0, variance 1, eps 0: a per-channel
  // affine map), about as fast as a copy; then dy * k added in place. Composed from elementwise
  // ops instead, it kept several activation-sized intermediates per layer.
  torch::Tensor dx =
      torch::batch_norm(x, m, b, torch::zeros_like(m), torch::ones_like(m), false, 0.0, 0.0, false);
  return dx.addcmul_(dy, per_channel(k, x));
}

void update_running(torch::Tensor& running_mean, torch::Tensor& running_var, const Stats& s,
                    double momentum) {
  torch::NoGradGuard no_grad;
  if (given(running_mean)) {
    running_mean.mul_(1 - momentum).add_(s.mean.to(running_mean.scalar_type()), momentum);
  }
  if (given(running_var)) {
    const torch::Tensor unbiased = s.var * (s.count / (s.count - 1));
    running_var.mul_(1 - momentum).add_(unbiased.to(running_var.scalar_type()), momentum);
  }
}

}  // namespace batch_norm
}  // namespace tessera
