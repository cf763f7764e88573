// DistributedOptimizer: gradient hooks that enqueue each allreduce as soon as autograd has
// produced the gradient, so communication overlaps the rest of backward (Horovod's design).
//
// The hook sits on each parameter's gradient accumulator (the AccumulateGrad node), as a post
// hook: it runs after the new gradient has been added into .grad, which is the moment that
// parameter's gradient for this pass is final. The accumulator nodes are kept alive here,
// since a parameter only holds a weak reference to its own.
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <map>
#include <mutex>
#include <utility>

#include "common/error.h"
#include "tessera/torch.h"
#include "torch/context.h"

namespace tessera {

Compression parse_compression(const std::string& name) {
  if (name == "none") return Compression::kNone;
  if (name == "fp16") return Compression::kFloat16;
  if (name == "bf16") return Compression::kBFloat16;
  throw InvalidArgument("compression '" + name + "' is not known; accepted: none, fp16, bf16");
}

struct DistributedOptimizer::Impl {
  struct Param {
    std::string name;
    torch::Tensor tensor;
    // shared_ptr in libtorch 1.13, intrusive_ptr in later releases: take whichever it returns.
    decltype(torch::autograd::impl::grad_accumulator(std::declval<torch::Tensor>())) accumulator;
    uintptr_t hook_key = 0;
    int group = -1;
    int passes = 0;         // backward passes since the last step
    bool enqueued = false;  // its allreduce is in flight
    torch::Tensor wire;     // what travels: .grad itself, or its compressed copy
    TensorHandle handle;
  };

  DistributedOptions options;
  std::vector<Param> params;
  std::vector<std::vector<size_t>> groups;
  std::vector<size_t> group_ready;  // members whose passes are complete
  std::mutex mu;                    // hooks may run on autograd's threads
  // The step check, for steps announced by set_step: the caller's step index, max-allreduced
  // as {step, -step} beside the gradients; max == -max(-step) exactly when every rank is at
  // the same step. (A count kept here could not tell: a rank that skips a batch still makes
  // the same number of step() calls until the end.)
  int64_t steps = 0;
  int64_t caller_step = -1;  // set_step's value for the coming step; -1: no check
  bool step_enqueued = false;
  // synchronize() finished and no gradient arrived since: step() must not reduce again.
  bool synchronized = false;
  torch::Tensor step_wire;
  TensorHandle step_handle;

  void enqueue_step_check();
  void check_hooks_attached() const;
  void finish_step_check();

  void on_gradient(size_t i);
  void enqueue_one(size_t i);
  void enqueue_group(size_t g);
  torch::Tensor wire_of(Param& p);
  void finish(Param& p);
};

namespace {

class GradientHook : public torch::autograd::FunctionPostHook {
 public:
  GradientHook(DistributedOptimizer::Impl* impl, size_t index) : impl_(impl), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    impl_->on_gradient(index_);
    return outputs;
  }

 private:
  DistributedOptimizer::Impl* impl_;
  size_t index_;
};

}  // namespace

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
    : optimizer_(optimizer), options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  TESSERA_CHECK(options_.backward_passes_per_step >= 1,
                "backward_passes_per_step must be >= 1, got ", options_.backward_passes_per_step);
  TESSERA_CHECK(options_.compression == Compression::kNone || options_.op == ReduceOp::kAverage ||
                    options_.op == ReduceOp::kSum,
                "compressed gradients are averaged or summed; got ", reduce_op_name(options_.op));
  impl_->options = options_;
  for (const auto& kv : named_parameters) {
    if (!kv.value().requires_grad()) continue;
    Impl::Param p;
    p.name = kv.key();
    p.tensor = kv.value();
    impl_->params.push_back(std::move(p));
  }
  // Every wrapped optimizer's parameter must be one we reduce, or ranks would diverge.
  size_t in_optimizer = 0;
  for (const auto& group : optimizer_.param_groups()) in_optimizer += group.params().size();
  TESSERA_CHECK(in_optimizer <= impl_->params.size(), "the optimizer updates ", in_optimizer,
                " parameters but named_parameters lists ", impl_->params.size(),
                " that require gradients: pass the same module's named_parameters()");
  {
    // Every rank must reduce the same gradients: compare names, shapes and dtypes once.
    torch::OrderedDict<std::string, torch::Tensor> mine;
    for (const Impl::Param& p : impl_->params) mine.insert(p.name, p.tensor);
    verify_across_ranks("the parameters of DistributedOptimizer '" + options_.prefix + "'",
                        describe_parameters(mine, true), options_.process_set);
  }
  impl_->groups = plan_groups(impl_->params.size(), options_.groups);
  impl_->group_ready.assign(impl_->groups.size(), 0);
  for (size_t g = 0; g < impl_->groups.size(); ++g) {
    for (size_t i : impl_->groups[g]) impl_->params[i].group = static_cast<int>(g);
  }
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    Impl::Param& p = impl_->params[i];
    p.accumulator = torch::autograd::impl::grad_accumulator(p.tensor);
    TESSERA_CHECK(p.accumulator != nullptr, "parameter '", p.name,
                  "' has no gradient accumulator (is it a leaf that requires grad?)");
    p.hook_key = p.accumulator->add_post_hook(std::make_unique<GradientHook>(impl_.get(), i));
  }
}

DistributedOptimizer::~DistributedOptimizer() {
  // The hooks point at impl_: remove them before it goes. Collectives still in flight read
  // .grad, which the parameters keep alive; wait for them so no engine write lands later.
  for (Impl::Param& p : impl_->params) {
    if (p.accumulator) p.accumulator->del_post_hook(p.hook_key);
    if (p.enqueued) {
      try {
        tessera::synchronize(p.handle);
      } catch (...) {
      }
    }
  }
  if (impl_->step_enqueued) {
    try {
      tessera::synchronize(impl_->step_handle);
    } catch (...) {
    }
  }
}

torch::Tensor DistributedOptimizer::Impl::wire_of(Param& p) {
  torch::Tensor& grad = p.tensor.mutable_grad();
  if (!grad.defined()) grad = torch::zeros_like(p.tensor);  // unused this step: reduce zeros
  switch (options.compression) {
    case Compression::kNone:
      return grad;
    case Compression::kFloat16:
      return grad.to(torch::kHalf);
    case Compression::kBFloat16:
      return grad.to(torch::kBFloat16);
  }
  return grad;
}

void DistributedOptimizer::Impl::enqueue_one(size_t i) {
  Param& p = params[i];
  p.wire = wire_of(p);
  p.handle =
      allreduce_async_(p.wire, options.prefix + p.name, options.op, 1.0, 1.0, options.process_set);
  p.enqueued = true;
}

void DistributedOptimizer::Impl::enqueue_group(size_t g) {
  std::vector<torch::Tensor> wires;
  std::vector<std::string> names;
  for (size_t i : groups[g]) {
    params[i].wire = wire_of(params[i]);
    wires.push_back(params[i].wire);
    names.push_back(options.prefix + params[i].name);
  }
  std::vector<TensorHandle> hs =
      grouped_allreduce_async_(wires, names, options.op, 1.0, 1.0, options.process_set);
  for (size_t k = 0; k < groups[g].size(); ++k) {
    Param& p = params[groups[g][k]];
    p.handle = std::move(hs[k]);
    p.enqueued = true;
  }
}

void DistributedOptimizer::Impl::enqueue_step_check() {
  steps = caller_step;
  caller_step = -1;
  step_wire = torch::tensor({steps, -steps}, torch::kInt64);
  step_handle = allreduce_async_(step_wire, "tessera.step." + options.prefix, ReduceOp::kMax, 1.0,
                                 1.0, options.process_set);
  step_enqueued = true;
}

void DistributedOptimizer::Impl::finish_step_check() {
  step_enqueued = false;
  const torch::Tensor r = tessera::synchronize(step_handle);
  const int64_t high = r[0].item<int64_t>(), low = -r[1].item<int64_t>();
  if (high == low) return;
  // Some rank skipped or repeated a step: every rank saw the same max and min, so every rank
  // gathers the step counts and raises the same error.
  const torch::Tensor all = tessera::allgather(
      torch::tensor({steps}, torch::kInt64),
      "tessera.step." + options.prefix + "ranks." + std::to_string(high), options.process_set);
  std::map<int64_t, std::vector<int>> ranks_at;
  for (int64_t r = 0; r < all.numel(); ++r) {
    ranks_at[all[r].item<int64_t>()].push_back(static_cast<int>(r));
  }
  std::string where;
  for (const auto& kv : ranks_at) {
    where += (where.empty() ? "" : ", ") + std::string(kv.second.size() == 1 ? "rank " : "ranks ");
    for (size_t k = 0; k < kv.second.size(); ++k) {
      where += (k ? " " : "") + std::to_string(kv.second[k]);
    }
    where += " at step " + std::to_string(kv.first + 1);
  }
  throw InvalidArgument("DistributedOptimizer '" + options.prefix +
                        "': the ranks are at different steps (" + where +
                        ", tensor 'tessera.step." + options.prefix +
                        "'): a rank skipped or repeated a step, so its gradients were averaged "
                        "with another step's; every rank must call step() for every batch");
}

void DistributedOptimizer::Impl::on_gradient(size_t i) {
  std::lock_guard<std::mutex> lock(mu);
  // Rides with the first gradient of the step.
  if (!step_enqueued && caller_step >= 0) enqueue_step_check();
  synchronized = false;
  Param& p = params[i];
  ++p.passes;
  if (p.passes > options.backward_passes_per_step) {
    throw InvalidArgument(
        "DistributedOptimizer: backward produced a gradient for '" + p.name + "' " +
        std::to_string(p.passes) +
        " times since the last step(), but backward_passes_per_step is " +
        std::to_string(options.backward_passes_per_step) +
        ": call step() after every backward_passes_per_step backward passes (or raise it)");
  }
  if (p.passes < options.backward_passes_per_step) return;  // still accumulating locally
  if (p.group < 0) {
    enqueue_one(i);
  } else if (++group_ready[static_cast<size_t>(p.group)] ==
             groups[static_cast<size_t>(p.group)].size()) {
    enqueue_group(static_cast<size_t>(p.group));
  }
}

void DistributedOptimizer::Impl::finish(Param& p) {
  torch::Tensor reduced = tessera::synchronize(p.handle);
  torch::Tensor& grad = p.tensor.mutable_grad();
  if (!reduced.is_same(grad)) {
    torch::NoGradGuard no_grad;
    grad.copy_(reduced);  // decompress (or copy back from a non-contiguous gradient)
  }
  p.wire = torch::Tensor();
  p.enqueued = false;
  p.passes = 0;
}

// A parameter that .to(device or dtype) re-made after the hooks went in gets a new gradient
// accumulator without the hook (set_data drops the old one): its gradient would be reduced only
// here, after backward, and the overlap the hooks exist for would be lost without a word. The
// hooked accumulator still describes the old device and dtype. Every rank moved its model
// alike, so every rank fails here alike.
void DistributedOptimizer::Impl::check_hooks_attached() const {
  for (const Param& p : params) {
    const auto& was = p.accumulator->input_metadata(0);
    TESSERA_CHECK(was.device() == p.tensor.device() && was.dtype() == p.tensor.dtype(),
                  "parameter '", p.name, "' changed device or dtype (", p.tensor.device(), ", ",
                  p.tensor.scalar_type(),
                  ") after the DistributedOptimizer was made, which detached its gradient hook: "
                  "move the model first (model.to(...)), then make the DistributedOptimizer");
  }
}

void DistributedOptimizer::synchronize() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->check_hooks_attached();
  if (!impl_->step_enqueued && impl_->caller_step >= 0) impl_->enqueue_step_check();
  // Whatever the hooks did not enqueue (unused parameters, fewer passes than declared) goes
  // now, in the same order on every rank.
  for (size_t g = 0; g < impl_->groups.size(); ++g) {
    bool pending = false;
    for (size_t i : impl_->groups[g]) pending |= !impl_->params[i].enqueued;
    if (pending) impl_->enqueue_group(g);
  }
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    if (!impl_->params[i].enqueued) impl_->enqueue_one(i);
  }
  std::exception_ptr first;
  for (Impl::Param& p : impl_->params) {
    try {
      impl_->finish(p);
    } catch (...) {
      if (!first) first = std::current_exception();
      p.enqueued = false;
      p.passes = 0;
    }
  }
  std::fill(impl_->group_ready.begin(), impl_->group_ready.end(), 0);
  if (impl_->step_enqueued) {
    try {
      impl_->finish_step_check();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
  impl_->synchronized = true;
}

void DistributedOptimizer::step() {
  if (!impl_->synchronized) synchronize();  // the caller may have, to inspect the gradients
  impl_->synchronized = false;
  optimizer_.step();
  // The autotuner counts steps here: every rank steps the same number of times, and between
  // steps no gradient of this optimizer is in flight.
  step_done();
}

void DistributedOptimizer::zero_grad() {
  optimizer_.zero_grad();
  impl_->synchronized = false;  // a step whose gradients were inspected and then dropped
}

void DistributedOptimizer::set_step(int64_t step) {
  TESSERA_CHECK(step >= 0, "set_step: a step index is >= 0, got ", step);
  std::lock_guard<std::mutex> lock(impl_->mu);
  TESSERA_CHECK(!impl_->step_enqueued, "set_step(", step,
                ") after backward has started this step; call it before backward");
  impl_->caller_step = step;
}

}  // namespace tessera
