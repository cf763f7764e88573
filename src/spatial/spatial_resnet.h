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

#include "models/resnet.h"
#include "spatial/halo_exchange.h"

namespace tessera {
namespace spatial {

// Logits [N, classes] from tiles [N, 3, H/P_h, W/P_w]. `bn_stats`: the communicator of the batch
// statistics (default: the spatial group's).
torch::Tensor spatial_resnet_forward(models::ResNetImpl& net, const torch::Tensor& tile,
                                     const TileSpace& space,
                                     comm::Communicator* bn_stats = nullptr);

}  // namespace spatial
}  // namespace tessera
