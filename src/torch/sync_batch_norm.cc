// BatchNorm2d and SyncBatchNorm. In training with sync, the statistics are those of the batch
// concatenated over the ranks of the process set:
//   forward:  allreduce [sum x, sum x^2, count] per channel (one f64 collective), then
//             mean = S1 / M, var = S2 / M - mean^2 (biased, for normalising),
//   backward: allreduce [sum dy, sum dy * (x - mean)] per channel, then
//             dx = w * invstd * (dy - sum_dy / M - (x - mean) * invstd^2 * sum_dy_xmu / M).
// The parameter gradients stay local (each rank's share); the DistributedOptimizer averages
// them like any other gradient, which gives exactly the gradient of the mean loss over ranks.
// Statistics are accumulated in f64 so that the result matches single-process BatchNorm on the
// concatenated batch to rounding, whatever the split.
#include "common/error.h"
#include "tessera/torch.h"

namespace tessera {
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

class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               torch::Tensor weight, torch::Tensor bias, double eps,
                               std::string name, int64_t process_set, torch::Tensor stats_out) {
    const int64_t c = x.size(1);
    const auto dims = reduce_dims(x);
    torch::Tensor xd = x.to(torch::kFloat64);
    torch::Tensor local =
        torch::cat({xd.sum(dims), (xd * xd).sum(dims),
                    torch::full({1}, static_cast<double>(x.numel() / c), xd.options())});
    torch::Tensor global =
        allreduce(local, name + ".stats", ReduceOp::kSum, 1.0, 1.0, static_cast<int>(process_set));
    const double m = global[2 * c].item<double>();
    TESSERA_CHECK(m > 1, "SyncBatchNorm '", name, "': ", m,
                  " value(s) per channel over all ranks; training needs more than 1");
    torch::Tensor mean = global.slice(0, 0, c) / m;
    torch::Tensor var = (global.slice(0, c, 2 * c) / m - mean * mean).clamp_min(0);
    torch::Tensor invstd = (var + eps).rsqrt();
    stats_out.copy_(torch::cat({mean, var, global.slice(0, 2 * c)}));
    torch::Tensor xmu = xd - per_channel(mean, x);
    torch::Tensor y = xmu * per_channel(invstd, x);
    if (weight.defined()) y = y * per_channel(weight.to(torch::kFloat64), x);
    if (bias.defined()) y = y + per_channel(bias.to(torch::kFloat64), x);
    ctx->save_for_backward({x, weight, mean, invstd});
    ctx->saved_data["name"] = name;
    ctx->saved_data["process_set"] = process_set;
    ctx->saved_data["m"] = m;
    return y.to(x.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    torch::Tensor x = saved[0], weight = saved[1], mean = saved[2], invstd = saved[3];
    const std::string name = ctx->saved_data["name"].toStringRef();
    const int process_set = static_cast<int>(ctx->saved_data["process_set"].toInt());
    const double m = ctx->saved_data["m"].toDouble();
    const int64_t c = x.size(1);
    const auto dims = reduce_dims(x);
    torch::Tensor dy = grads[0].to(torch::kFloat64);
    torch::Tensor xmu = x.to(torch::kFloat64) - per_channel(mean, x);
    torch::Tensor local_dy = dy.sum(dims);
    torch::Tensor local_dy_xmu = (dy * xmu).sum(dims);
    torch::Tensor global = allreduce(torch::cat({local_dy, local_dy_xmu}), name + ".grad",
                                     ReduceOp::kSum, 1.0, 1.0, process_set);
    torch::Tensor sum_dy = global.slice(0, 0, c), sum_dy_xmu = global.slice(0, c, 2 * c);
    torch::Tensor w = weight.defined() ? weight.to(torch::kFloat64) : torch::ones_like(mean);
    torch::Tensor dx =
        per_channel(w * invstd, x) *
        (dy - per_channel(sum_dy / m, x) - xmu * per_channel(invstd * invstd * sum_dy_xmu / m, x));
    torch::Tensor dweight, dbias;
    if (weight.defined()) dweight = (local_dy_xmu * invstd).to(weight.scalar_type());
    if (weight.defined()) dbias = local_dy.to(weight.scalar_type());
    return {dx.to(x.scalar_type()), dweight,         dbias,          torch::Tensor(),
            torch::Tensor(),        torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor sync_batch_norm(const torch::Tensor& x, const torch::Tensor& weight,
                              const torch::Tensor& bias, double eps, const std::string& name,
                              int process_set, torch::Tensor* mean, torch::Tensor* var,
                              double* count) {
  TESSERA_CHECK(x.dim() >= 2, "SyncBatchNorm '", name, "' needs input [N, C, ...], got ",
                x.sizes());
  const int64_t c = x.size(1);
  // On x's device: the running statistics (there too) are updated from it.
  torch::Tensor stats = torch::empty({2 * c + 1}, x.options().dtype(torch::kFloat64));
  torch::Tensor y =
      SyncBatchNormFunction::apply(x, weight, bias, eps, name, int64_t{process_set}, stats);
  if (mean) *mean = stats.slice(0, 0, c);
  if (var) *var = stats.slice(0, c, 2 * c);
  if (count) *count = stats[2 * c].item<double>();
  return y;
}

BatchNorm2dImpl::BatchNorm2dImpl(BatchNormOptions options) : options_(std::move(options)) {
  TESSERA_CHECK(options_.num_features > 0, "BatchNorm2d needs num_features > 0, got ",
                options_.num_features);
  const int64_t c = options_.num_features;
  weight = register_parameter("weight", torch::ones({c}));
  bias = register_parameter("bias", torch::zeros({c}));
  running_mean = register_buffer("running_mean", torch::zeros({c}));
  running_var = register_buffer("running_var", torch::ones({c}));
  num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
  if (options_.sync && options_.name.empty()) {
    static std::atomic<uint64_t> counter{0};
    options_.name = "syncbn." + std::to_string(counter++);
  }
}

torch::Tensor BatchNorm2dImpl::forward(const torch::Tensor& x) {
  TESSERA_CHECK(x.dim() == 4, "BatchNorm2d expects [N, C, H, W], got ", x.sizes());
  TESSERA_CHECK(x.size(1) == options_.num_features, "BatchNorm2d with ", options_.num_features,
                " channels got input with ", x.size(1));
  const bool sync = options_.sync && is_training() && is_initialized() && size() > 1;
  if (!sync) {
    if (is_training()) num_batches_tracked += 1;
    // cuDNN's kernels on a GPU where torch would use them (torch.nn.BatchNorm2d does the same).
    return torch::batch_norm(x, weight, bias, running_mean, running_var, is_training(),
                             options_.momentum, options_.eps,
                             at::globalContext().userEnabledCuDNN());
  }
  torch::Tensor mean, var;
  double total = 0;
  // Successive calls of one layer (several forwards before a backward) get their own names.
  const std::string name = options_.name + "." + std::to_string(calls_++ % 1024);
  torch::Tensor y = sync_batch_norm(x, weight, bias, options_.eps, name, options_.process_set,
                                    &mean, &var, &total);
  {
    torch::NoGradGuard no_grad;
    num_batches_tracked += 1;
    // Running variance is unbiased over the global batch, as torch.nn.SyncBatchNorm keeps it.
    torch::Tensor unbiased = var * (total / (total - 1));
    const double mom = options_.momentum;
    running_mean.mul_(1 - mom).add_(mean.to(running_mean.scalar_type()), mom);
    running_var.mul_(1 - mom).add_(unbiased.to(running_var.scalar_type()), mom);
  }
  return y;
}

}  // namespace tessera
