// The scaling simulator: one training step of a workload on N GPUs of a machine, event by event
// as the engine runs it. Backward makes gradients ready in order; the engine wakes every cycle,
// negotiates what is ready everywhere (the cost model's vote, plus the coordinator round without
// the response cache), fuses ready tensors up to the threshold and reduces each buffer with the
// algorithm, one after another, overlapping the rest of backward. The step ends when compute and
// the last allreduce have both finished. Efficiency is the one-GPU step over the N-GPU step (weak
// scaling: the same batch per GPU). Pure.
#pragma once

#include <string>
#include <vector>

#include "comm/algorithm.h"
#include "engine/options.h"
#include "tune/machine.h"

namespace tessera {
namespace tune {

struct Gradient {
  std::string name;
  double bytes = 0;
  double ready_s = 0;  // from the start of the step
};

struct Workload {
  std::string name;
  double compute_s = 0;        // forward + backward + update of one GPU's batch
  double images_per_step = 0;  // per GPU
  std::vector<Gradient> gradients;
};

// Gradients of the given sizes (listed in the order backward produces them) made ready evenly
// over the backward pass, which follows a forward of `forward_fraction` of the compute. The
// assumption where no timeline is at hand: backward's layers cost alike.
Workload workload_from_sizes(const std::string& name, const std::vector<double>& bytes,
                             double compute_s, double images_per_step,
                             double forward_fraction = 1.0 / 3);

struct StepResult {
  int gpus = 1;
  double step_s = 0;
  double compute_s = 0;
  double control_s = 0;  // negotiation on the critical path, summed over the step's cycles
  double data_s = 0;     // allreduce time, summed
  double exposed_s = 0;  // step_s - compute_s: communication not hidden behind compute
  int cycles = 0;
  int buffers = 0;
  double throughput = 0;                                       // images per second over all GPUs
  double efficiency = 0;                                       // compute_s / step_s
  comm::Algorithm largest_algorithm = comm::Algorithm::kAuto;  // of the largest buffer
};

// The engine's settings `t` as the simulator models them: cycle time, fusion threshold, cache,
// and the algorithm of each buffer (t.allreduce's range for its size, else the best predicted).
// Colors and segments are the machine model's own. Throws InvalidArgument for gpus < 1, gpus
// beyond the machine, a bad range text, or an empty workload.
StepResult simulate_step(const Machine& m, const Workload& w, int gpus, const engine::Tunables& t);

}  // namespace tune
}  // namespace tessera
