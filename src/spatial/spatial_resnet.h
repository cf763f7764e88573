// ResNet over a tiled image: the ordinary model (models::ResNet, torchvision's names), run with
// spatial layers. The parameters are the model's own, so a checkpoint moves between spatial and
// ordinary training unchanged; only the forward differs: each convolution and pooling exchanges
// halos, BatchNorm takes the whole image's statistics (over the spatial group, or the
// communicator given), and global pooling sums over the group. The logits are the same on every
// rank of the group; divide a loss computed from them by the group's size, then sum the weight
// gradients over the group (average over data groups), and the step is the ordinary model's on
// the whole image.
#pragma once

#include <torch/torch.h>

#include "models/deeplab.h"
#include "models/resnet.h"
#include "spatial/halo_exchange.h"

namespace tessera {
namespace spatial {

// Logits [N, classes] from tiles [N, 3, H/P_h, W/P_w]. `bn_stats`: the communicator of the batch
// statistics (default: the spatial group's).
torch::Tensor spatial_resnet_forward(models::ResNetImpl& net, const torch::Tensor& tile,
                                     const TileSpace& space,
                                     comm::Communicator* bn_stats = nullptr);

// Checks, before any message is sent, that a size x size image cuts into a tiles_h x tiles_w
// grid through every layer of `net` (each layer's outputs divide into equal tiles, halos no
// wider than a neighbour's tile). Throws InvalidArgument naming the layer, what does not work
// and the nearest image sizes that do.
void check_resnet_tiling(models::ResNetImpl& net, int64_t size, int tiles_h, int tiles_w);

// layer1's and layer4's feature tiles (the DeepLab backbone's), in training or eval mode.
models::ResNetFeatures spatial_resnet_features(models::ResNetImpl& net, const torch::Tensor& tile,
                                               const TileSpace& space,
                                               comm::Communicator* bn_stats = nullptr);

// DeepLab-v3+ logits tiles [N, classes, H/P_h, W/P_w] from image tiles: the backbone, ASPP (its
// image-pooling branch from the group's global pool), decoder and classifier with spatial
// layers, the bilinear upsamplings by integer factors. The ASPP's widest dilation needs feature
// tiles at least as tall and wide as the rate (18 at output stride 16): images of at least
// 16 * 18 * P pixels per side; smaller ones are refused naming sizes that work.
torch::Tensor spatial_deeplab_forward(models::DeepLabV3PlusImpl& net, const torch::Tensor& tile,
                                      const TileSpace& space,
                                      comm::Communicator* bn_stats = nullptr);

// Cross-entropy over the tiles of each image, normalised by the group's count of labelled pixels
// (255 ignored), times the group's size: the undivided-loss convention under which the
// DistributedOptimizer's average over all ranks is the right step (docs/spatial.md). Divide the
// value by the group's size for the loss of the whole image.
torch::Tensor spatial_segmentation_loss(const torch::Tensor& logits, const torch::Tensor& target,
                                        const TileSpace& space);

}  // namespace spatial
}  // namespace tessera
