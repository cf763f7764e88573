#include "models/resnet.h"

#include "common/error.h"

namespace tessera {
namespace models {
namespace {

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1,
                       int64_t dilation = 1) {
  const int64_t padding = kernel == 3 ? dilation : 0;
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel)
                               .stride(stride)
                               .padding(padding)
                               .dilation(dilation)
                               .bias(false));
}

// conv3x3 - bn - relu - conv3x3 - bn, plus the shortcut.
class BasicBlockImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride, int64_t dilation,
                 torch::nn::Sequential downsample, const NormSpec& norm, const std::string& name)
      : conv1(register_module("conv1", conv(inplanes, planes, 3, stride, dilation))),
        bn1(register_module("bn1", make_norm(planes, norm, name + ".bn1"))),
        conv2(register_module("conv2", conv(planes, planes, 3, 1, dilation))),
        bn2(register_module("bn2", make_norm(planes, norm, name + ".bn2"))),
        downsample(downsample) {
    if (downsample) register_module("downsample", downsample);
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor identity = downsample ? downsample->forward(x) : x;
    torch::Tensor out = torch::relu(bn1(conv1(x)));
    out = bn2(conv2(out));
    return torch::relu(out + identity);
  }
  // Declared in torchvision's registration order (members are initialised in this order).
  torch::nn::Conv2d conv1;
  BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  BatchNorm2d bn2;
  torch::nn::Sequential downsample;
};
TORCH_MODULE(BasicBlock);

// conv1x1 - bn - relu - conv3x3 (stride, dilation) - bn - relu - conv1x1 (x4) - bn, plus the
// shortcut (torchvision's ResNet v1.5: the stride sits on the 3x3).
class BottleneckImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  BottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride, int64_t dilation,
                 torch::nn::Sequential downsample, const NormSpec& norm, const std::string& name)
      : conv1(register_module("conv1", conv(inplanes, planes, 1))),
        bn1(register_module("bn1", make_norm(planes, norm, name + ".bn1"))),
        conv2(register_module("conv2", conv(planes, planes, 3, stride, dilation))),
        bn2(register_module("bn2", make_norm(planes, norm, name + ".bn2"))),
        conv3(register_module("conv3", conv(planes, planes * kExpansion, 1))),
        bn3(register_module("bn3", make_norm(planes * kExpansion, norm, name + ".bn3"))),
        downsample(downsample) {
    if (downsample) register_module("downsample", downsample);
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor identity = downsample ? downsample->forward(x) : x;
    torch::Tensor out = torch::relu(bn1(conv1(x)));
    out = torch::relu(bn2(conv2(out)));
    out = bn3(conv3(out));
    return torch::relu(out + identity);
  }
  // Declared in torchvision's registration order (members are initialised in this order).
  torch::nn::Conv2d conv1;
  BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  BatchNorm2d bn2;
  torch::nn::Conv2d conv3;
  BatchNorm2d bn3;
  torch::nn::Sequential downsample;
};
TORCH_MODULE(Bottleneck);

}  // namespace

BatchNorm2d make_norm(int64_t channels, const NormSpec& spec, const std::string& name) {
  BatchNormOptions o;
  o.num_features = channels;
  o.sync = spec.sync;
  o.process_set = spec.process_set;
  o.name = "syncbn." + name;
  return BatchNorm2d(o);
}

void init_weights(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  // Not include_self: called from constructors, before the module is held by a shared_ptr.
  for (auto& m : module.modules(/*include_self=*/false)) {
    if (auto* c = m->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
      if (c->bias.defined()) c->bias.zero_();
    } else if (auto* b = m->as<BatchNorm2d>()) {
      b->weight.fill_(1);
      b->bias.zero_();
    }
  }
}

ResNetImpl::ResNetImpl(const ResNetOptions& options) : options_(options) {
  TESSERA_CHECK(options.depth == 18 || options.depth == 50, "ResNet depth ", options.depth,
                " is not built in; accepted: 18, 50");
  const std::string& p = options.name_prefix;
  conv1 = register_module(
      "conv1",
      torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)));
  bn1 = register_module("bn1", make_norm(64, options.norm, p + "bn1"));
  const std::array<int, 4> blocks =
      options.depth == 18 ? std::array<int, 4>{2, 2, 2, 2} : std::array<int, 4>{3, 4, 6, 3};
  const auto& dil = options.replace_stride_with_dilation;
  layer1 = register_module("layer1", make_layer(64, blocks[0], 1, false, p + "layer1"));
  layer2 = register_module("layer2", make_layer(128, blocks[1], 2, dil[0], p + "layer2"));
  layer3 = register_module("layer3", make_layer(256, blocks[2], 2, dil[1], p + "layer3"));
  layer4 = register_module("layer4", make_layer(512, blocks[3], 2, dil[2], p + "layer4"));
  if (options.num_classes > 0) {
    fc = register_module("fc", torch::nn::Linear(high_channels(), options.num_classes));
  }
  init_weights(*this);
}

int64_t ResNetImpl::low_channels() const { return options_.depth == 18 ? 64 : 256; }
int64_t ResNetImpl::high_channels() const { return options_.depth == 18 ? 512 : 2048; }

torch::nn::Sequential ResNetImpl::make_layer(int64_t planes, int blocks, int64_t stride,
                                             bool dilate, const std::string& name) {
  const int64_t expansion =
      options_.depth == 18 ? BasicBlockImpl::kExpansion : BottleneckImpl::kExpansion;
  const int64_t previous_dilation = dilation_;
  if (dilate) {
    dilation_ *= stride;
    stride = 1;
  }
  torch::nn::Sequential downsample{nullptr};
  if (stride != 1 || inplanes_ != planes * expansion) {
    downsample = torch::nn::Sequential(
        conv(inplanes_, planes * expansion, 1, stride),
        make_norm(planes * expansion, options_.norm, name + ".0.downsample.1"));
  }
  torch::nn::Sequential layer;
  for (int i = 0; i < blocks; ++i) {
    const std::string block = name + "." + std::to_string(i);
    const int64_t s = i == 0 ? stride : 1;
    const int64_t d = i == 0 ? previous_dilation : dilation_;
    torch::nn::Sequential ds = i == 0 ? downsample : torch::nn::Sequential{nullptr};
    if (options_.depth == 18) {
      layer->push_back(BasicBlock(inplanes_, planes, s, d, ds, options_.norm, block));
    } else {
      layer->push_back(Bottleneck(inplanes_, planes, s, d, ds, options_.norm, block));
    }
    inplanes_ = planes * expansion;
  }
  return layer;
}

ResNetFeatures ResNetImpl::features(torch::Tensor x) {
  x = torch::relu(bn1(conv1(x)));
  x = torch::max_pool2d(x, 3, 2, 1);
  ResNetFeatures f;
  f.low = layer1->forward(x);
  f.high = layer4->forward(layer3->forward(layer2->forward(f.low)));
  return f;
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  TESSERA_CHECK(fc, "this ResNet was built as a backbone (num_classes 0): use features()");
  torch::Tensor h = features(std::move(x)).high;
  h = torch::adaptive_avg_pool2d(h, {1, 1}).flatten(1);
  return fc(h);
}

}  // namespace models
}  // namespace tessera
