// Augmentations (pure functions of the decoded sample and an explicit generator, so a worker's
// output depends only on (seed, epoch, sample)). Images come in as [H, W, 3] u8 RGB and leave
// as [3, S, S] f32 normalised with the ImageNet mean and deviation; masks come in as [H, W] u8
// labels and leave as [S, S] i64.
//
// Classification (training): random resized crop (area 8-100%, aspect 3/4-4/3, as in
// torchvision / Goyal et al.), horizontal flip. Evaluation: resize the short side to
// size * 256 / 224, centre crop.
// Segmentation (training): random scale 0.5-2.0 (bilinear for the image, nearest neighbour for
// the mask), random crop with padding (image padded with the mean, i.e. 0 after normalising;
// mask with 255, ignored), horizontal flip, the same for image and mask. Evaluation: centre
// crop with the same padding, no scaling.
#pragma once

#include <torch/torch.h>

#include <random>
#include <utility>

namespace tessera {
namespace data {

struct Normalize {
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float std[3] = {0.229f, 0.224f, 0.225f};
};

// [H, W, 3] u8 -> [3, H, W] f32, (x / 255 - mean) / std.
torch::Tensor normalize(const torch::Tensor& hwc, const Normalize& n);

struct ClassificationAugment {
  int64_t size = 224;
  double min_area = 0.08, max_area = 1.0;
  double min_ratio = 3.0 / 4.0, max_ratio = 4.0 / 3.0;
  bool flip = true;
  Normalize norm;
};

struct SegmentationAugment {
  int64_t crop = 512;
  double min_scale = 0.5, max_scale = 2.0;
  bool flip = true;
  Normalize norm;
};

torch::Tensor augment_classification(const torch::Tensor& image, const ClassificationAugment& a,
                                     std::mt19937_64& rng);
torch::Tensor eval_classification(const torch::Tensor& image, const ClassificationAugment& a);

// {image [3, crop, crop] f32, mask [crop, crop] i64}. Throws InvalidArgument when the mask's
// size differs from the image's (naming `source`).
std::pair<torch::Tensor, torch::Tensor> augment_segmentation(const torch::Tensor& image,
                                                             const torch::Tensor& mask,
                                                             const SegmentationAugment& a,
                                                             std::mt19937_64& rng,
                                                             const std::string& source);
std::pair<torch::Tensor, torch::Tensor> eval_segmentation(const torch::Tensor& image,
                                                          const torch::Tensor& mask,
                                                          const SegmentationAugment& a,
                                                          const std::string& source);

}  // namespace data
}  // namespace tessera
