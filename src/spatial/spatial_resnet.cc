#include "spatial/spatial_resnet.h"

#include "common/error.h"
#include "spatial/spatial_ops.h"

namespace tessera {
namespace spatial {
namespace {

struct Run {
  TileSpace space;
  comm::Communicator* stats;
  bool training;
};

std::shared_ptr<torch::nn::Module> child(torch::nn::Module& m, const std::string& name) {
  for (const auto& item : m.named_children()) {
    if (item.key() == name) return item.value();
  }
  return nullptr;
}

torch::Tensor conv(torch::nn::Module& m, const torch::Tensor& x, const Run& r) {
  auto* c = m.as<torch::nn::Conv2d>();
  TESSERA_CHECK(c != nullptr, "spatial ResNet: expected a Conv2d");
  const auto& o = c->options;
  const auto* pad = c10::get_if<torch::ExpandingArray<2>>(&o.padding());
  auto square = [](const torch::ExpandingArray<2>& a) { return (*a)[0] == (*a)[1]; };
  TESSERA_CHECK(pad != nullptr && square(*pad) && square(o.stride()) && square(o.dilation()) &&
                    square(o.kernel_size()),
                "spatial ResNet: convolutions must be square with explicit padding");
  return spatial_conv2d(x, c->weight, c->bias, (*o.stride())[0], (**pad)[0], (*o.dilation())[0],
                        r.space);
}

torch::Tensor norm(torch::nn::Module& m, const torch::Tensor& x, const Run& r) {
  auto* b = m.as<BatchNorm2d>();
  TESSERA_CHECK(b != nullptr, "spatial ResNet: expected a BatchNorm2d");
  if (!r.training) {
    return torch::batch_norm(x, b->weight, b->bias, b->running_mean, b->running_var, false,
                             b->options().momentum, b->options().eps, false);
  }
  {
    torch::NoGradGuard no_grad;
    b->num_batches_tracked.add_(1);
  }
  return spatial_batch_norm(x, b->weight, b->bias, b->running_mean, b->running_var,
                            b->options().momentum, b->options().eps, *r.stats);
}

// BasicBlock (conv1 bn1 conv2 bn2) or Bottleneck (… conv3 bn3), with an optional downsample.
torch::Tensor block(torch::nn::Module& b, const torch::Tensor& x, const Run& r) {
  torch::Tensor identity = x;
  if (auto down = child(b, "downsample")) {
    identity = norm(*child(*down, "1"), conv(*child(*down, "0"), x, r), r);
  }
  torch::Tensor out = torch::relu(norm(*child(b, "bn1"), conv(*child(b, "conv1"), x, r), r));
  if (auto conv3 = child(b, "conv3")) {
    out = torch::relu(norm(*child(b, "bn2"), conv(*child(b, "conv2"), out, r), r));
    out = norm(*child(b, "bn3"), conv(*conv3, out, r), r);
  } else {
    out = norm(*child(b, "bn2"), conv(*child(b, "conv2"), out, r), r);
  }
  return torch::relu(out + identity);
}

}  // namespace

torch::Tensor spatial_resnet_forward(models::ResNetImpl& net, const torch::Tensor& tile,
                                     const TileSpace& space, comm::Communicator* bn_stats) {
  TESSERA_CHECK(space.comm != nullptr, "spatial_resnet_forward needs the spatial communicator");
  const Run r{space, bn_stats != nullptr ? bn_stats : space.comm, net.is_training()};
  torch::Tensor x = torch::relu(norm(*child(net, "bn1"), conv(*child(net, "conv1"), tile, r), r));
  x = spatial_max_pool2d(x, 3, 2, 1, 1, space);
  for (const char* layer : {"layer1", "layer2", "layer3", "layer4"}) {
    for (const auto& b : child(net, layer)->children()) x = block(*b, x, r);
  }
  auto fc = child(net, "fc");
  TESSERA_CHECK(fc != nullptr, "spatial_resnet_forward needs a classifier (num_classes > 0)");
  return fc->as<torch::nn::Linear>()->forward(spatial_global_avg_pool(x, space));
}

}  // namespace spatial
}  // namespace tessera
