// BatchNorm2d and SyncBatchNorm. In training with sync, the statistics are those of the batch
// concatenated over the ranks of the process set, by the math of torch/batch_norm_math.h. The
// parameter gradients stay local (each rank's share); the DistributedOptimizer averages them
// like any other gradient, which gives exactly the gradient of the mean loss over ranks. The
// statistics' sums are accumulated in f64, so that they match single-process BatchNorm on the
// concatenated batch to rounding whatever the split; the elementwise work runs in x's dtype
// through torch's batch-norm kernels.
#include "common/error.h"
#include "tessera/torch.h"
#include "torch/batch_norm_math.h"

namespace tessera {
namespace {

// The ranks of a process set are the parts of torch/batch_norm_math.h: one named allreduce of
// the statistics' sums in the forward, one of the gradients' in the backward.
class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               torch::Tensor weight, torch::Tensor bias, double eps,
                               std::string name, int64_t process_set, torch::Tensor running_mean,
                               torch::Tensor running_var, double momentum) {
    const int set = static_cast<int>(process_set);
    const std::string what = "SyncBatchNorm '" + name + "'";
    TensorHandle sums = allreduce_async(batch_norm::local_sums(x, torch::kFloat64), name + ".stats",
                                        ReduceOp::kSum, 1.0, 1.0, set);
    batch_norm::Stats s;
    if (x.is_cpu()) {
      s = batch_norm::stats_of(synchronize(sums), eps, what);
    } else {
      // The count over the set on the host, beside the sums' device allreduce: reading it from
      // the device result would make the host wait for the device at every layer.
      const torch::Tensor mine =
          torch::full({1}, static_cast<double>(x.numel() / x.size(1)), torch::kFloat64);
      const double count =
          allreduce(mine, name + ".count", ReduceOp::kSum, 1.0, 1.0, set).item<double>();
      s = batch_norm::stats_of(synchronize(sums), count, eps, what);
    }
    batch_norm::update_running(running_mean, running_var, s, momentum);
    ctx->save_for_backward({x, weight, s.mean.to(x.scalar_type()), s.invstd.to(x.scalar_type())});
    ctx->saved_data["name"] = name;
    ctx->saved_data["process_set"] = process_set;
    ctx->saved_data["count"] = s.count;
    return batch_norm::normalize(x, weight, bias, s, eps);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3];
    const std::string name = ctx->saved_data["name"].toStringRef();
    const int process_set = static_cast<int>(ctx->saved_data["process_set"].toInt());
    const int64_t c = x.size(1);
    const torch::Tensor local = batch_norm::local_grad_sums(grads[0], x, mean);
    const torch::Tensor global =
        allreduce(local, name + ".grad", ReduceOp::kSum, 1.0, 1.0, process_set);
    const torch::Tensor dx = batch_norm::input_grad(grads[0], x, weight, mean, invstd, global,
                                                    ctx->saved_data["count"].toDouble());
    torch::Tensor dweight, dbias;  // this rank's shares
    if (weight.defined()) dweight = local.narrow(0, c, c) * invstd;
    if (weight.defined()) dbias = local.narrow(0, 0, c).clone();
    return {dx,
            dweight,
            dbias,
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor sync_batch_norm(const torch::Tensor& x, const torch::Tensor& weight,
                              const torch::Tensor& bias, double eps, const std::string& name,
                              int process_set, torch::Tensor running_mean,
                              torch::Tensor running_var, double momentum) {
  TESSERA_CHECK(x.dim() >= 2, "SyncBatchNorm '", name, "' needs input [N, C, ...], got ",
                x.sizes());
  return SyncBatchNormFunction::apply(x, weight, bias, eps, name, int64_t{process_set},
                                      running_mean, running_var, momentum);
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
  // Successive calls of one layer (several forwards before a backward) get their own names.
  const std::string name = options_.name + "." + std::to_string(calls_++ % 1024);
  {
    torch::NoGradGuard no_grad;
    num_batches_tracked += 1;
  }
  torch::Tensor y = sync_batch_norm(x, weight, bias, options_.eps, name, options_.process_set,
                                    running_mean, running_var, options_.momentum);
  return y;
}

}  // namespace tessera
