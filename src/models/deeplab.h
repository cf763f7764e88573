// DeepLab-v3+ (Chen et al. 2018): a ResNet backbone at output stride 16 or 8 (stride replaced
// by dilation in layer4, or layer3 and layer4), ASPP (a 1x1 branch, three 3x3 branches at
// rates 6/12/18 -- doubled at stride 8 -- and image pooling), and the decoder that fuses the
// upsampled ASPP output with layer1's low-level features (reduced to 48 channels) through two
// 3x3 convolutions, then bilinear upsampling to the input size.
//
// Names: the backbone is "backbone." + torchvision's ResNet names (so an ImageNet ResNet loads
// into it); the head is "aspp.*", "decoder.*" and "classifier.*".
#pragma once

#include "models/resnet.h"

namespace tessera {
namespace models {

struct DeepLabOptions {
  int depth = 50;  // backbone: 18 or 50
  int64_t num_classes = 21;
  int output_stride = 16;  // 16 or 8
  int64_t aspp_channels = 256;
  NormSpec norm;
};

// ASPP: convs.0 (1x1), convs.1-3 (3x3 at the rates), pool (image pooling), project (1x1).
class AsppImpl : public torch::nn::Module {
 public:
  AsppImpl(int64_t in, int64_t out, std::array<int64_t, 3> rates, const NormSpec& norm);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::ModuleList convs{nullptr};
  torch::nn::Sequential pool{nullptr}, project{nullptr};
};
TORCH_MODULE(Aspp);

// Decoder: reduce (low-level features to 48 channels), fuse (two 3x3 convolutions).
class DecoderImpl : public torch::nn::Module {
 public:
  DecoderImpl(int64_t low, int64_t channels, const NormSpec& norm);
  torch::Tensor forward(const torch::Tensor& aspp, const torch::Tensor& low);

 private:
  torch::nn::Sequential reduce{nullptr};
  torch::nn::ModuleList fuse{nullptr};
};
TORCH_MODULE(Decoder);

class DeepLabV3PlusImpl : public torch::nn::Module {
 public:
  explicit DeepLabV3PlusImpl(const DeepLabOptions& options);
  torch::Tensor forward(torch::Tensor x);  // logits [N, num_classes, H, W]
  const DeepLabOptions& options() const { return options_; }

 private:
  DeepLabOptions options_;
  ResNet backbone{nullptr};
  Aspp aspp{nullptr};
  Decoder decoder{nullptr};
  torch::nn::Conv2d classifier{nullptr};
};
TORCH_MODULE(DeepLabV3Plus);

// ASPP rates for an output stride: {6, 12, 18} at 16, {12, 24, 36} at 8. Throws otherwise.
std::array<int64_t, 3> aspp_rates(int output_stride);

}  // namespace models
}  // namespace tessera
