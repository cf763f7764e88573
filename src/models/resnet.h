// ResNet-18 and ResNet-50 (He et al.), with torchvision's parameter names and shapes (conv1,
// bn1, layer1.0.conv1, layer1.0.downsample.0, ..., fc), so weights move between tessera and
// PyTorch. replace_stride_with_dilation turns the stride of layer2..4 into dilation, as
// torchvision does for segmentation backbones (DeepLab's output stride 16 or 8); unlike
// torchvision, BasicBlock accepts dilation too, so ResNet-18 can serve as a DeepLab backbone.
#pragma once

#include <array>
#include <string>

#include "tessera/torch.h"

namespace tessera {
namespace models {

// How the models normalise: plain BatchNorm2d, or SyncBatchNorm over a process set.
struct NormSpec {
  bool sync = false;
  int process_set = 0;
};

struct ResNetOptions {
  int depth = 50;              // 18 or 50
  int64_t num_classes = 1000;  // 0: no fc (a backbone)
  std::array<bool, 3> replace_stride_with_dilation = {false, false, false};
  NormSpec norm;
  std::string name_prefix;  // prefix of the SyncBatchNorm collectives' names ("backbone.")
};

// The feature maps a segmentation head needs.
struct ResNetFeatures {
  torch::Tensor low;   // layer1's output: stride 4
  torch::Tensor high;  // layer4's output: stride 32, 16 or 8
};

class ResNetImpl : public torch::nn::Module {
 public:
  explicit ResNetImpl(const ResNetOptions& options);
  torch::Tensor forward(torch::Tensor x);  // logits [N, num_classes]
  ResNetFeatures features(torch::Tensor x);
  // Channels of layer1's and layer4's outputs (64/512 for ResNet-18, 256/2048 for ResNet-50).
  int64_t low_channels() const;
  int64_t high_channels() const;
  const ResNetOptions& options() const { return options_; }

 private:
  torch::nn::Sequential make_layer(int64_t planes, int blocks, int64_t stride, bool dilate,
                                   const std::string& name);
  ResNetOptions options_;
  int64_t inplanes_ = 64;
  int64_t dilation_ = 1;
  torch::nn::Conv2d conv1{nullptr};
  BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet);

// Kaiming-normal (fan_out, ReLU) convolutions, unit BatchNorm, as torchvision initialises.
void init_weights(torch::nn::Module& module);
// A tessera BatchNorm2d named for its collectives.
BatchNorm2d make_norm(int64_t channels, const NormSpec& spec, const std::string& name);

}  // namespace models
}  // namespace tessera
