// DistributedOptimizer: the core's GradientReducer (torch/gradient_reducer.h: gradient hooks
// that overlap communication with backward, accumulation, groups, compression, the step check),
// the same bookkeeping Python's hvd.DistributedOptimizer uses, around a torch::optim::Optimizer.
#include <utility>

#include "common/error.h"
#include "tessera/torch.h"
#include "torch/gradient_reducer.h"

namespace tessera {

Compression parse_compression(const std::string& name) {
  if (name == "none") return Compression::kNone;
  if (name == "fp16") return Compression::kFloat16;
  if (name == "bf16") return Compression::kBFloat16;
  throw InvalidArgument("compression '" + name + "' is not known; accepted: none, fp16, bf16");
}

struct DistributedOptimizer::Impl {
  Impl(std::vector<std::pair<std::string, torch::Tensor>> params, const DistributedOptions& o,
       std::vector<std::vector<size_t>> groups)
      : reducer(std::move(params), o, std::move(groups)) {}
  detail::GradientReducer reducer;
};

std::vector<std::vector<size_t>> DistributedOptimizer::plan_groups(size_t n, int groups) {
  TESSERA_CHECK(groups >= 0, "groups must be >= 0, got ", groups);
  std::vector<std::vector<size_t>> plan;
  if (groups == 0 || n == 0) return plan;
  const size_t g = std::min(static_cast<size_t>(groups), n);
  // Reverse registration order: backward produces the last layers' gradients first, so each
  // group fills up in turn and is released while backward continues with the next.
  for (size_t k = 0; k < g; ++k) {
    std::vector<size_t> members;
    const size_t begin = k * n / g, end = (k + 1) * n / g;  // sizes differ by at most one
    for (size_t j = begin; j < end; ++j) members.push_back(n - 1 - j);
    plan.push_back(std::move(members));
  }
  return plan;
}

DistributedOptimizer::DistributedOptimizer(
    torch::optim::Optimizer& optimizer,
    const torch::OrderedDict<std::string, torch::Tensor>& named_parameters,
    DistributedOptions options)
    : optimizer_(optimizer), options_(std::move(options)) {
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& kv : named_parameters) {
    if (kv.value().requires_grad()) params.emplace_back(kv.key(), kv.value());
  }
  // Every wrapped optimizer's parameter must be one we reduce, or ranks would diverge.
  size_t in_optimizer = 0;
  for (const auto& group : optimizer_.param_groups()) in_optimizer += group.params().size();
  TESSERA_CHECK(in_optimizer <= params.size(), "the optimizer updates ", in_optimizer,
                " parameters but named_parameters lists ", params.size(),
                " that require gradients: pass the same module's named_parameters()");
  std::vector<std::vector<size_t>> groups = plan_groups(params.size(), options_.groups);
  impl_ = std::make_unique<Impl>(std::move(params), options_, std::move(groups));
}

DistributedOptimizer::~DistributedOptimizer() = default;

void DistributedOptimizer::synchronize() { impl_->reducer.synchronize(); }

void DistributedOptimizer::step() {
  // The caller may have synchronized already, to inspect the gradients.
  if (!impl_->reducer.synchronized()) synchronize();
  impl_->reducer.forget_synchronized();
  optimizer_.step();
  // The autotuner counts steps here: every rank steps the same number of times, and between
  // steps no gradient of this optimizer is in flight.
  step_done();
}

void DistributedOptimizer::zero_grad() {
  optimizer_.zero_grad();
  impl_->reducer.forget_synchronized();  // a step whose gradients were inspected and dropped
}

void DistributedOptimizer::set_step(int64_t step) { impl_->reducer.set_step(step); }

}  // namespace tessera
