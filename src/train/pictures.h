// What a run learned, as pictures (pure): a grid of validation images beside their true and
// predicted masks, and the loss and metric curves. `tessera train --predictions/--curve` writes
// them; `make demo` ends by naming both.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace tessera {
namespace train {

// One row per sample: the image, its true mask, the predicted mask, each `zoom` times larger
// (nearest neighbour), 2 white pixels between pictures. Images [N, 3, S, S] (any normalisation:
// each is stretched from its own min..max to 0..255), masks [N, S, S] integer labels drawn in
// the Pascal VOC colours (255, ignored, white). Returns [H, W, 3] u8.
torch::Tensor prediction_grid(const torch::Tensor& images, const torch::Tensor& truth,
                              const torch::Tensor& predicted, int64_t zoom = 2);

// Two panels in one SVG: the training loss against the step, and the validation metric
// (`metric_name`: "miou", "accuracy", "auc") against the step, on 0..1.
std::string training_curve_svg(const std::vector<std::pair<double, double>>& loss,
                               const std::vector<std::pair<double, double>>& metric,
                               const std::string& metric_name);

}  // namespace train
}  // namespace tessera
