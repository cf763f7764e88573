// Internal to src/torch and the Python extension: the DistributedOptimizer's bookkeeping, once
// for both front ends (tessera::DistributedOptimizer in C++, hvd.DistributedOptimizer in
// Python): a hook on each parameter's gradient accumulator counts backward passes and, at the
// last of backward_passes_per_step, enqueues that gradient's allreduce (alone or with its
// group), so communication overlaps the rest of backward; synchronize() enqueues what the hooks
// did not (unused parameters reduce zeros, so every rank runs the same collectives), waits, and
// leaves the results in .grad. Compression, the gradient_predivide_factor's split, sparse
// gradients (Horovod's allgather path, or dense with sparse_as_dense) and the step check live
// here too.
//
// The hook sits on the AccumulateGrad node as a post hook: it runs after the new gradient has
// been added into .grad, the moment that parameter's gradient for this pass is final. The nodes
// are kept alive here, since a parameter only holds a weak reference to its own.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/torch.h"

namespace tessera {
namespace detail {

class GradientReducer {
 public:
  // `params`: (name, parameter) of every parameter that requires a gradient, names the same on
  // every rank. `options` as DistributedOptimizer's, except that the groups are the parameter
  // indices in `groups` (each reduced as one grouped allreduce; empty: each alone), so that
  // Python's lists of parameters and C++'s plan_groups both fit. Collective over the process
  // set: the ranks' parameters (names, shapes, dtypes) are compared, and a difference is an
  // error on every rank naming it. Throws InvalidArgument for a bad option or group.
  GradientReducer(std::vector<std::pair<std::string, torch::Tensor>> params,
                  const DistributedOptions& options, std::vector<std::vector<size_t>> groups);
  // Removes the hooks and waits (never throws) for what is still in flight.
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Enqueues what the hooks did not, waits for every gradient and leaves the results in .grad.
  // `poll` is called about every 50 ms while waiting (a front end's signal check); what it
  // throws, synchronize throws. Every rank's error is rethrown after all handles are done.
  void synchronize(const std::function<void()>& poll = {});
  // From the next step on, `passes` backward passes are summed before each reduction.
  void set_backward_passes_per_step(int passes);
  // The step check (DistributedOptimizer::set_step).
  void set_step(int64_t step);
  // Whether some gradient's reduction is in flight (zero_grad must not clear .grad then).
  bool in_flight() const;
  // synchronize() ran and no gradient arrived since (step() must not reduce again).
  bool synchronized() const;
  void forget_synchronized();

  struct Impl;  // public for the hook in the .cc

 private:
  bool in_flight_locked() const;  // under impl_->mu
  std::unique_ptr<Impl> impl_;
};

}  // namespace detail
}  // namespace tessera
