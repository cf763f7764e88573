// Batches onto the run's device, overlapped with the steps (`tessera train --device cuda`).
//
// The workers leave each batch in pinned (page-locked) host memory, which a GPU copies from
// without the host waiting. DeviceFeed takes step s+1's batch from the input as soon as step s
// has its own and queues its copy on a side stream, so the copy runs while step s computes;
// step s+1's work waits for that copy only, on the GPU. On the CPU it hands batches through.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "data/synthetic_shapes.h"
#include "train/input/step_input.h"

namespace tessera {
namespace train {

// The batch's tensors in pinned host memory (a copy; run by the input's workers).
data::Batch pinned_batch(const data::Batch& b);

// Copies batches to one device; the CUDA one on its own stream (device_copy_cuda.cc).
class DeviceCopier {
 public:
  virtual ~DeviceCopier() = default;
  // Queues the copies of `host`'s tensors; the result may still be in flight.
  virtual data::Batch start(const data::Batch& host) = 0;
  // Makes the caller's current stream wait for `b`'s copies, and keeps b's memory for it.
  virtual void ready(data::Batch& b) = 0;
};

// A copier to `device`: synchronous copies (the CPU, or a libtorch without CUDA streams), or
// the side-stream one where libtorch has CUDA.
std::unique_ptr<DeviceCopier> make_device_copier(const torch::Device& device);

class DeviceFeed {
 public:
  DeviceFeed(StepInput& input, std::unique_ptr<DeviceCopier> copier);
  // Step `step`'s batch on the device (steps in order, below `end`), with step + 1's queued.
  data::Batch batch(int64_t step, int64_t end);

 private:
  StepInput& input_;
  std::unique_ptr<DeviceCopier> copier_;
  int64_t queued_step_ = -1;  // the step whose batch `queued_` holds
  data::Batch queued_;
};

}  // namespace train
}  // namespace tessera
