// The math of batch normalisation over a batch spread across parts, written once: the ranks of
// a process set (SyncBatchNorm: sync_batch_norm.cc, and through the extension Python's) and the
// tiles of an image (spatial/spatial_ops.cc). Each part computes its local sums, the caller sums
// them over the parts with its own collective, and these functions do the rest through torch's
// fused batch-norm kernels:
//   forward:  [sum x, sum x^2, count] per channel -> mean = S1 / M, var = S2 / M - mean^2
//             (biased, for normalising), y = (x - mean) invstd w + b;
//   backward: [sum dy, sum dy (x - mean)] per channel ->
//             dx = w invstd (dy - sum_dy / M - (x - mean) invstd^2 sum_dy_xmu / M).
// The parameter gradients stay each part's share (sum dy (x - mean) invstd, sum dy): the
// optimizer sums or averages them like any other gradient.
#pragma once

#include <torch/torch.h>

#include <string>

namespace tessera {
namespace batch_norm {

// [sum x (C), sum x^2 (C), count (1)] over every dimension but 1, accumulated in `acc`.
torch::Tensor local_sums(const torch::Tensor& x, torch::ScalarType acc);

struct Stats {
  torch::Tensor mean, var, invstd;  // [C], in the sums' dtype
  double count = 0;                 // values per channel over every part
};
// From the sums over every part. Throws InvalidArgument naming `what` when there is not more
// than one value per channel (as torch's BatchNorm in training).
Stats stats_of(const torch::Tensor& sums, double eps, const std::string& what);
// The same with the count known on the host (sums' last element not read): reading it from a
// CUDA tensor would make the host wait for the device.
Stats stats_of(const torch::Tensor& sums, double count, double eps, const std::string& what);

// y in x's dtype, through batch_norm's inference kernel. weight, bias: defined or not.
torch::Tensor normalize(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias, const Stats& s, double eps);

// [sum dy (C), sum dy (x - mean) (C)], from batch_norm's backward kernel, in x's dtype.
torch::Tensor local_grad_sums(const torch::Tensor& dy, const torch::Tensor& x,
                              const torch::Tensor& mean);
// dx from the grad sums over every part. weight: defined or not; mean, invstd in x's dtype.
torch::Tensor input_grad(const torch::Tensor& dy, const torch::Tensor& x,
                         const torch::Tensor& weight, const torch::Tensor& mean,
                         const torch::Tensor& invstd, const torch::Tensor& grad_sums, double count);

// running = (1 - momentum) running + momentum batch, the variance unbiased over every part (as
// torch.nn.SyncBatchNorm keeps it). In place; either may be undefined or empty (not tracked).
void update_running(torch::Tensor& running_mean, torch::Tensor& running_var, const Stats& s,
                    double momentum);

}  // namespace batch_norm
}  // namespace tessera
