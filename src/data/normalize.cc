// normalize, apart from the augmentations: the slides' tiles use it too, and it needs no image
// library (a build without codecs has it).
#include "data/augment.h"

namespace tessera {
namespace data {

torch::Tensor normalize(const torch::Tensor& hwc, const Normalize& n) {
  torch::Tensor x = hwc.permute({2, 0, 1}).to(torch::kFloat).div_(255.0f);
  torch::Tensor mean = torch::tensor({n.mean[0], n.mean[1], n.mean[2]}).view({3, 1, 1});
  torch::Tensor sd = torch::tensor({n.std[0], n.std[1], n.std[2]}).view({3, 1, 1});
  return ((x - mean) / sd).contiguous();
}

}  // namespace data
}  // namespace tessera
