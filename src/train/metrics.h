// Evaluation metrics over a confusion matrix (rows: target class, columns: predicted), which
// ranks sum with one allreduce: accuracy for classification, mean IoU for segmentation; and the
// area under the ROC curve for two classes (the slides' metric), from scores gathered first.
#pragma once

#include <torch/torch.h>

#include <vector>

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

// Area under the ROC curve of `scores` (higher: more likely positive) against `labels` (0 or 1):
// the probability that a random positive scores above a random negative, ties counting half
// (Mann-Whitney U / (positives x negatives)). Throws InvalidArgument when a class is missing
// or a label is not 0 or 1.
double roc_auc(const std::vector<double>& scores, const std::vector<int64_t>& labels);

}  // namespace train
}  // namespace tessera
