#include "spatial/spatial_resnet.h"

#include <sstream>
#include <string>
#include <variant>

#include "common/error.h"
#include "spatial/spatial_ops.h"
#include "spatial/tile_geometry.h"

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

// A square convolution's window (the same on both axes).
WindowSpec window_of(torch::nn::Module& m) {
  auto* c = m.as<torch::nn::Conv2d>();
  TESSERA_CHECK(c != nullptr, "spatial ResNet: expected a Conv2d");
  const auto& o = c->options;
  // The padding is a c10::variant in libtorch 1.13 and a std::variant later: unqualified, the
  // call finds either one's get_if (std's by this using, c10's by argument-dependent lookup).
  using std::get_if;
  const auto* pad = get_if<torch::ExpandingArray<2>>(&o.padding());
  auto square = [](const torch::ExpandingArray<2>& a) { return (*a)[0] == (*a)[1]; };
  TESSERA_CHECK(pad != nullptr && square(*pad) && square(o.stride()) && square(o.dilation()) &&
                    square(o.kernel_size()),
                "spatial ResNet: convolutions must be square with explicit padding");
  return WindowSpec{(*o.kernel_size())[0], (*o.stride())[0], (*o.dilation())[0], (**pad)[0]};
}

torch::Tensor conv(torch::nn::Module& m, const torch::Tensor& x, const Run& r) {
  const WindowSpec w = window_of(m);
  auto* c = m.as<torch::nn::Conv2d>();
  return spatial_conv2d(x, c->weight, c->bias, w.stride, w.padding, w.dilation, r.space);
}

// The stem's max pooling.
const WindowSpec kStemPool{3, 2, 1, 1};

// Walks the ResNet's windows in forward order over one axis of n inputs cut into `parts` tiles:
// "" when every layer tiles, else where and why not.
std::string tiling_problem(models::ResNetImpl& net, int64_t n, int parts) {
  auto step = [&](const std::string& where, const WindowSpec& w, int64_t& size) {
    const std::string problem = axis_problem(size, parts, w);
    if (!problem.empty()) return where + " (" + w.describe() + "): " + problem;
    size = window_output_size(size, w);
    return std::string();
  };
  std::string p = step("conv1", window_of(*child(net, "conv1")), n);
  if (p.empty()) p = step("maxpool", kStemPool, n);
  for (const char* layer : {"layer1", "layer2", "layer3", "layer4"}) {
    for (const auto& item : child(net, layer)->named_children()) {
      if (!p.empty()) return p;
      const std::string name = std::string(layer) + "." + item.key();
      int64_t side = n;
      if (auto down = child(*item.value(), "downsample")) {
        p = step(name + ".downsample.0", window_of(*child(*down, "0")), side);
      }
      for (const char* c : {"conv1", "conv2", "conv3"}) {
        auto m = child(*item.value(), c);
        if (m && p.empty()) p = step(name + "." + c, window_of(*m), n);
      }
    }
  }
  return p;
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

models::ResNetFeatures features(models::ResNetImpl& net, const torch::Tensor& tile, const Run& r) {
  torch::Tensor x = torch::relu(norm(*child(net, "bn1"), conv(*child(net, "conv1"), tile, r), r));
  x = spatial_max_pool2d(x, 3, 2, 1, 1, r.space);
  models::ResNetFeatures f;
  for (const char* layer : {"layer1", "layer2", "layer3", "layer4"}) {
    for (const auto& b : child(net, layer)->children()) x = block(*b, x, r);
    if (std::string(layer) == "layer1") f.low = x;
  }
  f.high = x;
  return f;
}

// conv - BatchNorm - ReLU (a Sequential named .0 .1 .2).
torch::Tensor conv_bn_relu(torch::nn::Module& seq, const torch::Tensor& x, const Run& r) {
  return torch::relu(norm(*child(seq, "1"), conv(*child(seq, "0"), x, r), r));
}

torch::Tensor upsample_to(const torch::Tensor& x, int64_t rows, const TileSpace& space) {
  TESSERA_CHECK(rows % x.size(2) == 0, "spatial DeepLab: upsampling ", x.size(2), " rows to ", rows,
                " is not by an integer factor");
  return spatial_upsample_bilinear(x, rows / x.size(2), space);
}

}  // namespace

void check_resnet_tiling(models::ResNetImpl& net, int64_t size, int tiles_h, int tiles_w) {
  auto problem = [&](int64_t n) {
    std::string p = tiling_problem(net, n, tiles_h);
    if (p.empty()) p = tiling_problem(net, n, tiles_w);
    return p;
  };
  const std::string why = problem(size);
  if (why.empty()) return;
  std::ostringstream os;
  os << "--image-size " << size << " does not cut into a " << tiles_h << "x" << tiles_w
     << " grid of tiles through this ResNet: at " << why;
  int64_t below = 0, above = 0;
  for (int64_t d = 1; d <= 1 << 14 && (below == 0 || above == 0); ++d) {
    if (below == 0 && size - d >= 1 && problem(size - d).empty()) below = size - d;
    if (above == 0 && problem(size + d).empty()) above = size + d;
  }
  if (below != 0 || above != 0) {
    os << "; image sizes that work: ";
    if (below != 0) os << below << (above != 0 ? " or " : "");
    if (above != 0) os << above;
  }
  throw InvalidArgument(os.str());
}

models::ResNetFeatures spatial_resnet_features(models::ResNetImpl& net, const torch::Tensor& tile,
                                               const TileSpace& space,
                                               comm::Communicator* bn_stats) {
  TESSERA_CHECK(space.comm != nullptr, "spatial_resnet_features needs the spatial communicator");
  return features(net, tile,
                  Run{space, bn_stats != nullptr ? bn_stats : space.comm, net.is_training()});
}

torch::Tensor spatial_deeplab_forward(models::DeepLabV3PlusImpl& net, const torch::Tensor& tile,
                                      const TileSpace& space, comm::Communicator* bn_stats) {
  TESSERA_CHECK(space.comm != nullptr, "spatial_deeplab_forward needs the spatial communicator");
  const Run r{space, bn_stats != nullptr ? bn_stats : space.comm, net.is_training()};
  const models::ResNetFeatures f =
      features(*child(net, "backbone")->as<models::ResNetImpl>(), tile, r);
  // ASPP: four convolution branches on the tiles, the image-pooling branch from the global pool
  // (the same on every rank, spread over the tile), then the projection.
  torch::nn::Module& aspp = *child(net, "aspp");
  std::vector<torch::Tensor> branches;
  for (const auto& m : child(aspp, "convs")->children())
    branches.push_back(conv_bn_relu(*m, f.high, r));
  const torch::Tensor pooled = spatial_global_avg_pool(f.high, space).unsqueeze(2).unsqueeze(3);
  torch::nn::Module& pool = *child(aspp, "pool");
  torch::Tensor p = child(pool, "0")->as<torch::nn::Conv2d>()->forward(pooled);
  // The pooled vector is the same on every rank: its statistics over the group are those of the
  // batch (each copy counted alike), so the group's BatchNorm serves here too.
  p = torch::relu(norm(*child(pool, "1"), p, r));
  branches.push_back(p.expand({-1, -1, f.high.size(2), f.high.size(3)}));
  torch::Tensor y = conv_bn_relu(*child(aspp, "project"), torch::cat(branches, 1), r);
  // Decoder: up to layer1's size, joined with its reduced features, two 3x3 fusions.
  torch::nn::Module& dec = *child(net, "decoder");
  y = torch::cat(
      {upsample_to(y, f.low.size(2), space), conv_bn_relu(*child(dec, "reduce"), f.low, r)}, 1);
  for (const auto& m : child(dec, "fuse")->children()) y = conv_bn_relu(*m, y, r);
  y = conv(*child(net, "classifier"), y, r);
  return upsample_to(y, tile.size(2), space);
}

torch::Tensor spatial_segmentation_loss(const torch::Tensor& logits, const torch::Tensor& target,
                                        const TileSpace& space) {
  TESSERA_CHECK(space.comm != nullptr, "spatial_segmentation_loss needs the spatial communicator");
  const torch::Tensor local = torch::nn::functional::cross_entropy(
      logits, target,
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(255).reduction(torch::kSum));
  torch::Tensor count;
  {
    torch::NoGradGuard no_grad;
    count = group_sum(target.ne(255).sum().to(logits.scalar_type()).reshape({1}), *space.comm);
  }
  TESSERA_CHECK(count.item<double>() > 0,
                "spatial_segmentation_loss: no labelled pixel in the image");
  return local * static_cast<double>(space.comm->size()) / count.item<double>();
}

torch::Tensor spatial_resnet_forward(models::ResNetImpl& net, const torch::Tensor& tile,
                                     const TileSpace& space, comm::Communicator* bn_stats) {
  TESSERA_CHECK(space.comm != nullptr, "spatial_resnet_forward needs the spatial communicator");
  const Run r{space, bn_stats != nullptr ? bn_stats : space.comm, net.is_training()};
  const torch::Tensor x = features(net, tile, r).high;
  auto fc = child(net, "fc");
  TESSERA_CHECK(fc != nullptr, "spatial_resnet_forward needs a classifier (num_classes > 0)");
  return fc->as<torch::nn::Linear>()->forward(spatial_global_avg_pool(x, space));
}

}  // namespace spatial
}  // namespace tessera
