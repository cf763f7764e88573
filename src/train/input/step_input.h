// What the training loop asks of its input, whichever it is: batches of images for data
// parallelism (train/input/input.h) or each rank's tiles of whole slides for spatial decomposition
// (train/input/slide_input.h).
#pragma once

#include <cstdint>
#include <string>

#include "data/synthetic_shapes.h"

namespace tessera {
namespace train {

class StepInput {
 public:
  virtual ~StepInput() = default;
  virtual int64_t num_classes() const = 0;
  virtual int64_t steps_per_epoch() const = 0;
  // One line for the log: the data set, its sizes and classes.
  virtual std::string describe() const = 0;
  // This rank's batch of global step `step`; steps come in order, all below `end`.
  virtual data::Batch batch(int64_t step, int64_t end) = 0;
  // Closes the run (collective where the input needs it).
  virtual void finish() = 0;
  // Seconds the training thread waited for batches so far.
  virtual double waited_seconds() const = 0;
};

}  // namespace train
}  // namespace tessera
