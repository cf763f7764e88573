// Evaluation metrics over a confusion matrix (rows: target class, columns: predicted), which
// ranks sum with one allreduce: accuracy for classification, mean IoU for segmentation.
#pragma once

#include <torch/torch.h>

namespace tessera {
namespace train {

// Adds the (target, prediction) pairs to `confusion` [K, K] (i64); targets equal to
// `ignore_index` are skipped. `prediction` and `target` have the same shape.
void accumulate_confusion(torch::Tensor& confusion, const torch::Tensor& prediction,
                          const torch::Tensor& target, int64_t ignore_index = 255);
// Correct / total; 0 for an empty matrix.
double accuracy(const torch::Tensor& confusion);
// Mean over the classes that occur (in target or prediction) of TP / (TP + FP + FN).
double mean_iou(const torch::Tensor& confusion);

}  // namespace train
}  // namespace tessera
