#include "torch/gradient_reducer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <map>
#include <mutex>

#include "common/error.h"
#include "torch/context.h"

namespace tessera {
namespace detail {

struct GradientReducer::Impl {
  struct Param {
    std::string name;
    torch::Tensor tensor;
    // shared_ptr in libtorch 1.13, intrusive_ptr in later releases: take whichever it returns.
    decltype(torch::autograd::impl::grad_accumulator(std::declval<torch::Tensor>())) accumulator;
    uintptr_t hook_key = 0;
    int group = -1;
    int passes = 0;         // backward passes since the last step
    bool enqueued = false;  // its reduction is in flight
    bool gathered = false;  // a sparse gradient on Horovod's allgather path
    torch::Tensor wire;     // what travels: .grad itself, or its compressed or dense copy
    TensorHandle handle;
    SparseHandle gathered_handle;  // Horovod's sparse path
  };

  DistributedOptions options;
  std::vector<std::vector<size_t>> groups;  // parameter indices, one grouped allreduce each
  std::vector<Param> params;
  std::vector<size_t> group_ready;  // members whose passes are complete
  mutable std::mutex mu;            // hooks may run on autograd's threads
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
  void finish_step_check(const std::function<void()>& poll);
  void on_gradient(size_t i);
  void enqueue_one(size_t i);
  void enqueue_group(size_t g);
  void enqueue_gathered(Param& p);
  torch::Tensor wire_of(Param& p);
  void finish(Param& p, const std::function<void()>& poll);
  void enqueue_missing();
};

namespace {

class GradientHook : public torch::autograd::FunctionPostHook {
 public:
  GradientHook(GradientReducer::Impl* impl, size_t index) : impl_(impl), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    impl_->on_gradient(index_);
    return outputs;
  }

 private:
  GradientReducer::Impl* impl_;
  size_t index_;
};

constexpr double kPollSeconds = 0.05;

// What `poll` threw (a KeyboardInterrupt): it ends synchronize() at once, unlike a collective's
// error, after which the other gradients are still waited for. Not a std::exception, so that
// nothing on the way mistakes it for one.
struct PollAbort {
  std::exception_ptr error;
};

// Waits until `h` is done, in slices, calling `poll` between them. A rank lost meanwhile ends the
// wait with the liveness monitor's line.
void wait_done(const TensorHandle& h, const std::function<void()>& poll) {
  while (!h.wait_for(kPollSeconds)) {
    const std::string lost = lost_peer_error();
    if (!lost.empty()) throw Error(lost);
    if (!poll) continue;
    try {
      poll();
    } catch (...) {
      throw PollAbort{std::current_exception()};
    }
  }
}

torch::Tensor wait(TensorHandle& h, const std::function<void()>& poll) {
  wait_done(h, poll);
  return tessera::synchronize(h);
}

void check_options(const DistributedOptions& o, const std::vector<std::vector<size_t>>& groups,
                   size_t n) {
  TESSERA_CHECK(o.backward_passes_per_step >= 1, "backward_passes_per_step must be >= 1, got ",
                o.backward_passes_per_step);
  TESSERA_CHECK(
      o.compression == Compression::kNone || o.op == ReduceOp::kAverage || o.op == ReduceOp::kSum,
      "compressed gradients are averaged or summed; got ", reduce_op_name(o.op));
  TESSERA_CHECK(o.gradient_predivide_factor == 1.0 || o.op == ReduceOp::kAverage,
                "gradient_predivide_factor needs op=Average");
  TESSERA_CHECK(o.gradient_predivide_factor > 0, "gradient_predivide_factor must be > 0, got ",
                o.gradient_predivide_factor);
  std::vector<bool> seen(n, false);
  for (const auto& group : groups) {
    for (size_t i : group) {
      TESSERA_CHECK(i < n, "a group lists parameter ", i, " but there are ", n);
      TESSERA_CHECK(!seen[i], "groups list a parameter twice (index ", i, ")");
      seen[i] = true;
    }
  }
}

}  // namespace

GradientReducer::GradientReducer(std::vector<std::pair<std::string, torch::Tensor>> params,
                                 const DistributedOptions& options,
                                 std::vector<std::vector<size_t>> groups)
    : impl_(std::make_unique<Impl>()) {
  check_options(options, groups, params.size());
  impl_->options = options;
  impl_->groups = std::move(groups);
  torch::OrderedDict<std::string, torch::Tensor> mine;
  for (auto& kv : params) {
    Impl::Param p;
    p.name = kv.first;
    p.tensor = kv.second;
    TESSERA_CHECK(!mine.contains(p.name), "named_parameters lists '", p.name, "' twice");
    mine.insert(p.name, p.tensor);
    impl_->params.push_back(std::move(p));
  }
  // Every rank must reduce the same gradients: compare names, shapes and dtypes once.
  verify_across_ranks("the parameters of DistributedOptimizer '" + impl_->options.prefix + "'",
                      describe_parameters(mine, true), impl_->options.process_set);
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

GradientReducer::~GradientReducer() {
  // The hooks point at impl_: remove them before it goes. Collectives still in flight read
  // .grad, which the parameters keep alive; wait for them so no engine write lands later.
  for (Impl::Param& p : impl_->params) {
    if (p.accumulator) p.accumulator->del_post_hook(p.hook_key);
    if (!p.enqueued) continue;
    try {
      if (p.gathered) {
        tessera::synchronize(p.gathered_handle);
      } else {
        tessera::synchronize(p.handle);
      }
    } catch (...) {
    }
  }
  if (impl_->step_enqueued) {
    try {
      tessera::synchronize(impl_->step_handle);
    } catch (...) {
    }
  }
}

torch::Tensor GradientReducer::Impl::wire_of(Param& p) {
  torch::Tensor& grad = p.tensor.mutable_grad();
  if (!grad.defined()) grad = torch::zeros_like(p.tensor);  // unused this step: reduce zeros
  const torch::Tensor dense = grad.is_sparse() ? grad.to_dense() : grad;  // sparse_as_dense
  switch (options.compression) {
    case Compression::kNone:
      return dense;
    case Compression::kFloat16:
      return dense.to(torch::kHalf);
    case Compression::kBFloat16:
      return dense.to(torch::kBFloat16);
  }
  return dense;
}

void GradientReducer::Impl::enqueue_gathered(Param& p) {
  p.gathered_handle = sparse_allreduce_async(p.tensor.grad(), options.prefix + p.name, options.op,
                                             options.process_set);
  p.gathered = true;
  p.enqueued = true;
}

void GradientReducer::Impl::enqueue_one(size_t i) {
  Param& p = params[i];
  const torch::Tensor& grad = p.tensor.grad();
  if (grad.defined() && grad.is_sparse() && !options.sparse_as_dense) return enqueue_gathered(p);
  p.wire = wire_of(p);
  const double f = options.gradient_predivide_factor;
  p.handle = allreduce_async_(p.wire, options.prefix + p.name, options.op, 1.0 / f, f,
                              options.process_set);
  p.enqueued = true;
}

void GradientReducer::Impl::enqueue_group(size_t g) {
  std::vector<torch::Tensor> wires;
  std::vector<std::string> names;
  for (size_t i : groups[g]) {
    const torch::Tensor& grad = params[i].tensor.grad();
    TESSERA_CHECK(!(grad.defined() && grad.is_sparse() && !options.sparse_as_dense), "'",
                  params[i].name,
                  "' has a sparse gradient, which travels alone (Horovod's "
                  "allgather path): leave it out of the groups, or pass sparse_as_dense");
    params[i].wire = wire_of(params[i]);
    wires.push_back(params[i].wire);
    names.push_back(options.prefix + params[i].name);
  }
  const double f = options.gradient_predivide_factor;
  std::vector<TensorHandle> hs =
      grouped_allreduce_async_(wires, names, options.op, 1.0 / f, f, options.process_set);
  for (size_t k = 0; k < groups[g].size(); ++k) {
    Param& p = params[groups[g][k]];
    p.handle = std::move(hs[k]);
    p.enqueued = true;
  }
}

void GradientReducer::Impl::enqueue_step_check() {
  steps = caller_step;
  caller_step = -1;
  step_wire = torch::tensor({steps, -steps}, torch::kInt64);
  step_handle = allreduce_async_(step_wire, "tessera.step." + options.prefix, ReduceOp::kMax, 1.0,
                                 1.0, options.process_set);
  step_enqueued = true;
}

void GradientReducer::Impl::finish_step_check(const std::function<void()>& poll) {
  step_enqueued = false;
  const torch::Tensor r = wait(step_handle, poll);
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

void GradientReducer::Impl::on_gradient(size_t i) {
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

void GradientReducer::Impl::finish(Param& p, const std::function<void()>& poll) {
  torch::Tensor& grad = p.tensor.mutable_grad();
  torch::NoGradGuard no_grad;
  if (p.gathered) {
    wait_done(p.gathered_handle.indices, poll);
    wait_done(p.gathered_handle.values, poll);
    grad.zero_().add_(tessera::synchronize(p.gathered_handle));
  } else {
    const torch::Tensor reduced = wait(p.handle, poll);
    if (grad.is_sparse()) {  // sparse_as_dense: back to sparse, as Horovod does
      grad.zero_().add_(reduced.to(grad.scalar_type()).to_sparse());
    } else if (!reduced.is_same(grad)) {
      grad.copy_(reduced);  // decompress (or copy back from a non-contiguous gradient)
    }
  }
  p.wire = torch::Tensor();
  p.enqueued = false;
  p.gathered = false;
  p.passes = 0;
}

// A parameter that .to(device or dtype) re-made after the hooks went in gets a new gradient
// accumulator without the hook (set_data drops the old one): its gradient would be reduced only
// here, after backward, and the overlap the hooks exist for would be lost without a word. The
// hooked accumulator still describes the old device and dtype. Every rank moved its model
// alike, so every rank fails here alike.
void GradientReducer::Impl::check_hooks_attached() const {
  for (const Param& p : params) {
    const auto& was = p.accumulator->input_metadata(0);
    TESSERA_CHECK(was.device() == p.tensor.device() && was.dtype() == p.tensor.dtype(),
                  "parameter '", p.name, "' changed device or dtype (", p.tensor.device(), ", ",
                  p.tensor.scalar_type(),
                  ") after the DistributedOptimizer was made, which detached its gradient hook: "
                  "move the model first (model.to(...)), then make the DistributedOptimizer");
  }
}

// Whatever the hooks did not enqueue (unused parameters, fewer passes than declared) goes now,
// in the same order on every rank.
void GradientReducer::Impl::enqueue_missing() {
  for (size_t g = 0; g < groups.size(); ++g) {
    bool pending = false;
    for (size_t i : groups[g]) pending |= !params[i].enqueued;
    if (pending) enqueue_group(g);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].enqueued) enqueue_one(i);
  }
}

void GradientReducer::synchronize(const std::function<void()>& poll) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->check_hooks_attached();
  if (!impl_->step_enqueued && impl_->caller_step >= 0) impl_->enqueue_step_check();
  impl_->enqueue_missing();
  std::exception_ptr first;
  for (Impl::Param& p : impl_->params) {
    try {
      impl_->finish(p, poll);
    } catch (const PollAbort& a) {
      std::rethrow_exception(a.error);
    } catch (...) {
      if (!first) first = std::current_exception();
      p.enqueued = p.gathered = false;
      p.passes = 0;
    }
  }
  std::fill(impl_->group_ready.begin(), impl_->group_ready.end(), 0);
  if (impl_->step_enqueued) {
    try {
      impl_->finish_step_check(poll);
    } catch (const PollAbort& a) {
      std::rethrow_exception(a.error);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
  impl_->synchronized = true;
}

void GradientReducer::set_backward_passes_per_step(int passes) {
  TESSERA_CHECK(passes >= 1, "backward_passes_per_step must be >= 1, got ", passes);
  std::lock_guard<std::mutex> lock(impl_->mu);
  TESSERA_CHECK(!in_flight_locked(), "set_backward_passes_per_step(", passes,
                ") while gradients are being reduced: call it after step()");
  impl_->options.backward_passes_per_step = passes;
  for (Impl::Param& p : impl_->params) p.passes = 0;
}

void GradientReducer::set_step(int64_t step) {
  TESSERA_CHECK(step >= 0, "set_step: a step index is >= 0, got ", step);
  std::lock_guard<std::mutex> lock(impl_->mu);
  TESSERA_CHECK(!impl_->step_enqueued, "set_step(", step,
                ") after backward has started this step; call it before backward");
  impl_->caller_step = step;
}

bool GradientReducer::in_flight_locked() const {
  for (const Impl::Param& p : impl_->params) {
    if (p.enqueued) return true;
  }
  return false;
}

bool GradientReducer::in_flight() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return in_flight_locked();
}

bool GradientReducer::synchronized() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->synchronized;
}

void GradientReducer::forget_synchronized() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->synchronized = false;
}

}  // namespace detail
}  // namespace tessera
