#include "train/metrics.h"

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

}  // namespace train
}  // namespace tessera
