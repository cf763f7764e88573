#include "train/metrics.h"

#include <algorithm>

#include "common/error.h"

namespace tessera {
namespace train {

void accumulate_confusion(torch::Tensor& confusion, const torch::Tensor& prediction,
                          const torch::Tensor& target, int64_t ignore_index) {
  TESSERA_CHECK(prediction.sizes() == target.sizes(), "prediction ", prediction.sizes(),
                " and target ", target.sizes(), " differ in shape");
  const int64_t k = confusion.size(0);
  torch::Tensor t = target.flatten().to(torch::kLong), p = prediction.flatten().to(torch::kLong);
  torch::Tensor keep = t != ignore_index;
  t = t.masked_select(keep);
  p = p.masked_select(keep);
  TESSERA_CHECK(t.numel() == 0 || (t.min().item<int64_t>() >= 0 && t.max().item<int64_t>() < k),
                "a target class is outside 0..", k - 1, " (and not the ignore index ", ignore_index,
                ")");
  confusion += torch::bincount(t * k + p, {}, k * k).view({k, k}).to(torch::kLong);
}

double accuracy(const torch::Tensor& confusion) {
  const double total = static_cast<double>(confusion.sum().item<int64_t>());
  return total > 0 ? static_cast<double>(confusion.diagonal().sum().item<int64_t>()) / total : 0.0;
}

double mean_iou(const torch::Tensor& confusion) {
  torch::Tensor c = confusion.to(torch::kDouble);
  torch::Tensor tp = c.diagonal();
  torch::Tensor uni = c.sum(0) + c.sum(1) - tp;
  torch::Tensor present = uni > 0;
  if (present.sum().item<int64_t>() == 0) return 0.0;
  return (tp.masked_select(present) / uni.masked_select(present)).mean().item<double>();
}

double roc_auc(const std::vector<double>& scores, const std::vector<int64_t>& labels) {
  TESSERA_CHECK(scores.size() == labels.size(), "roc_auc: ", scores.size(), " scores for ",
                labels.size(), " labels");
  std::vector<size_t> order(scores.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Sum of the positives' ranks (1-based, ties given their mean rank).
  double rank_sum = 0;
  int64_t positives = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double mean_rank = 0.5 * static_cast<double>(i + 1 + j);
    for (size_t k = i; k < j; ++k) {
      const int64_t l = labels[order[k]];
      TESSERA_CHECK(l == 0 || l == 1, "roc_auc: label ", l, " is not 0 or 1");
      if (l == 1) {
        rank_sum += mean_rank;
        ++positives;
      }
    }
    i = j;
  }
  const int64_t negatives = static_cast<int64_t>(labels.size()) - positives;
  TESSERA_CHECK(positives > 0 && negatives > 0, "roc_auc needs both classes; got ", positives,
                " positives and ", negatives, " negatives");
  const double u =
      rank_sum - 0.5 * static_cast<double>(positives) * static_cast<double>(positives + 1);
  return u / (static_cast<double>(positives) * static_cast<double>(negatives));
}

}  // namespace train
}  // namespace tessera
