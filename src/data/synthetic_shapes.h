// The built-in synthetic data set (until real formats arrive with the data pipeline):
// coloured circles, squares and triangles on noise, with their segmentation masks and a class
// label. Sample i is a pure function of (seed, i): every rank, every run, any batch split sees
// the same pixels, which the data-parallel equivalence and resume tests rely on.
//
//   mask:  0 background, 1 circle, 2 square, 3 triangle (kSegmentationClasses = 4)
//   label: the kind of the largest shape, 0 circle, 1 square, 2 triangle (kClasses = 3)
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace tessera {
namespace data {

struct Batch {
  torch::Tensor images;  // [N, 3, S, S] f32, normalised to about zero mean, unit spread
  torch::Tensor masks;   // [N, S, S] i64
  torch::Tensor labels;  // [N] i64
};

class SyntheticShapes {
 public:
  static constexpr int64_t kClasses = 3;
  static constexpr int64_t kSegmentationClasses = 4;

  // `size` samples of `image_size`^2 pixels (image_size >= 16).
  SyntheticShapes(int64_t size, int64_t image_size, uint64_t seed);
  int64_t size() const { return size_; }
  int64_t image_size() const { return image_size_; }
  // The samples at `indices` (each in [0, size)), in that order.
  Batch get(const std::vector<int64_t>& indices) const;

 private:
  void render(int64_t index, float* image, int64_t* mask, int64_t* label) const;
  int64_t size_;
  int64_t image_size_;
  uint64_t seed_;
};

}  // namespace data
}  // namespace tessera
