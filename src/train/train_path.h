// The two ways `tessera train` spreads a step over ranks, behind one interface, so that the
// training loop (trainer.cc) is one loop:
//   - data parallelism: each rank trains its own batch of whole images (train/input/input.h) on the
//     whole model;
//   - spatial decomposition: each rank holds one tile of every image of its data group's batch
//     (train/input/slide_input.h), and the model exchanges halos over the grid (src/spatial).
// A path owns its input, builds the model for itself, runs forward and evaluates.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "models/registry.h"
#include "train/input/step_input.h"
#include "train/trainer.h"

namespace tessera {
namespace train {

struct Evaluation {
  double metric = 0;
  double accuracy = 0;
  // Segmentation, when asked to show some: this rank's first validation samples, their true and
  // predicted masks (CPU).
  torch::Tensor shown_images, shown_truth, shown_predicted;
};

class TrainPath {
 public:
  virtual ~TrainPath() = default;
  virtual StepInput& input() = 0;
  // Samples one step takes over every rank (a spatial group shares its samples).
  virtual int64_t global_batch() const = 0;
  // The model, built for this path (its tiling checked against the grid).
  virtual models::Model make_model(models::ModelSpec spec) = 0;
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  // Over every rank's share of the validation set, keeping up to `show` samples with their
  // predictions where the path has masks to show. Collective.
  virtual Evaluation evaluate(int64_t show) = 0;
  // "accuracy", "miou" or "auc".
  virtual std::string metric_name() const = 0;
  // The path's data figures into `result`, and rank 0's line about them when `talk`.
  virtual void report_data(TrainResult& result, bool talk) const = 0;
};

// The path `o` asks for (--spatial or not), with its input opened. Collective when `dist`.
// `pinned`: the workers leave batches in pinned memory (a GPU run, train/device/device_feed.h).
std::unique_ptr<TrainPath> make_train_path(const TrainOptions& o, bool dist, bool pinned);

}  // namespace train
}  // namespace tessera
