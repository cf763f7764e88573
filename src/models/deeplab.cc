#include "models/deeplab.h"

#include "common/error.h"

namespace tessera {
namespace models {
namespace {

// conv (no bias) - BatchNorm - ReLU, as one Sequential (names .0, .1, .2).
torch::nn::Sequential conv_bn_relu(int64_t in, int64_t out, int64_t kernel, int64_t dilation,
                                   const NormSpec& norm, const std::string& name) {
  return torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel)
                                                     .padding(kernel == 3 ? dilation : 0)
                                                     .dilation(dilation)
                                                     .bias(false)),
                               make_norm(out, norm, name + ".1"), torch::nn::ReLU());
}

torch::Tensor upsample(const torch::Tensor& x, at::IntArrayRef size) {
  return torch::nn::functional::interpolate(x, torch::nn::functional::InterpolateFuncOptions()
                                                   .size(std::vector<int64_t>{size[0], size[1]})
                                                   .mode(torch::kBilinear)
                                                   .align_corners(false));
}

}  // namespace

std::array<int64_t, 3> aspp_rates(int output_stride) {
  TESSERA_CHECK(output_stride == 16 || output_stride == 8, "DeepLab-v3+ output stride ",
                output_stride, " is not supported; accepted: 16, 8");
  return output_stride == 16 ? std::array<int64_t, 3>{6, 12, 18}
                             : std::array<int64_t, 3>{12, 24, 36};
}

AsppImpl::AsppImpl(int64_t in, int64_t a, std::array<int64_t, 3> rates, const NormSpec& norm) {
  convs = torch::nn::ModuleList();
  convs->push_back(conv_bn_relu(in, a, 1, 1, norm, "aspp.convs.0"));
  for (size_t i = 0; i < rates.size(); ++i) {
    convs->push_back(conv_bn_relu(in, a, 3, rates[i], norm, "aspp.convs." + std::to_string(i + 1)));
  }
  register_module("convs", convs);
  pool = register_module("pool", conv_bn_relu(in, a, 1, 1, norm, "aspp.pool"));
  project = register_module("project", conv_bn_relu(5 * a, a, 1, 1, norm, "aspp.project"));
}

torch::Tensor AsppImpl::forward(const torch::Tensor& x) {
  std::vector<torch::Tensor> branches;
  for (const auto& m : *convs) branches.push_back(m->as<torch::nn::Sequential>()->forward(x));
  torch::Tensor pooled = pool->forward(torch::adaptive_avg_pool2d(x, {1, 1}));
  branches.push_back(pooled.expand({-1, -1, x.size(2), x.size(3)}));
  return project->forward(torch::cat(branches, 1));
}

DecoderImpl::DecoderImpl(int64_t low, int64_t a, const NormSpec& norm) {
  reduce = register_module("reduce", conv_bn_relu(low, 48, 1, 1, norm, "decoder.reduce"));
  fuse = torch::nn::ModuleList(conv_bn_relu(a + 48, a, 3, 1, norm, "decoder.fuse.0"),
                               conv_bn_relu(a, a, 3, 1, norm, "decoder.fuse.1"));
  register_module("fuse", fuse);
}

torch::Tensor DecoderImpl::forward(const torch::Tensor& aspp, const torch::Tensor& low) {
  torch::Tensor up = upsample(aspp, low.sizes().slice(2));
  torch::Tensor y = torch::cat({up, reduce->forward(low)}, 1);
  for (const auto& m : *fuse) y = m->as<torch::nn::Sequential>()->forward(y);
  return y;
}

DeepLabV3PlusImpl::DeepLabV3PlusImpl(const DeepLabOptions& o) : options_(o) {
  TESSERA_CHECK(o.num_classes > 0, "DeepLab-v3+ needs num_classes > 0, got ", o.num_classes);
  TESSERA_CHECK(o.aspp_channels > 0, "DeepLab-v3+ needs aspp_channels > 0");
  ResNetOptions ro;
  ro.depth = o.depth;
  ro.num_classes = 0;
  ro.norm = o.norm;
  ro.name_prefix = "backbone.";
  // Output stride 16: layer4 dilated; 8: layer3 and layer4.
  ro.replace_stride_with_dilation = {false, o.output_stride == 8, true};
  const auto rates = aspp_rates(o.output_stride);
  backbone = register_module("backbone", ResNet(ro));
  aspp = register_module("aspp", Aspp(backbone->high_channels(), o.aspp_channels, rates, o.norm));
  decoder = register_module("decoder", Decoder(backbone->low_channels(), o.aspp_channels, o.norm));
  classifier = register_module(
      "classifier", torch::nn::Conv2d(torch::nn::Conv2dOptions(o.aspp_channels, o.num_classes, 1)));
  init_weights(*this);
}

torch::Tensor DeepLabV3PlusImpl::forward(torch::Tensor x) {
  TESSERA_CHECK(x.dim() == 4 && x.size(1) == 3, "DeepLab-v3+ expects [N, 3, H, W], got ",
                x.sizes());
  const std::vector<int64_t> in_hw = {x.size(2), x.size(3)};
  ResNetFeatures f = backbone->features(x);
  torch::Tensor y = decoder->forward(aspp->forward(f.high), f.low);
  return upsample(classifier(y), in_hw);
}

}  // namespace models
}  // namespace tessera
