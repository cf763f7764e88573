// The halo exchange as an autograd function, and the spatial convolution built on it.
//
// Forward: the tile [N, C, bh, bw] is framed by what its up to eight neighbours send (faces and
// corners), nonblocking on the spatial group's own communicator (never the engine's). Backward:
// the gradient of each received halo goes back to the neighbour it came from, which adds it to
// the gradient of its own block; so the convolution after it needs no backward of its own, and
// torch's autograd does the rest.
#pragma once

#include <torch/torch.h>

#include "comm/communicator.h"
#include "spatial/halo_plan.h"

namespace tessera {
namespace spatial {

// The tile framed by its halos: [N, C, plan.ext_rows, plan.ext_cols]. `spatial` is the spatial
// group's communicator, ranks ordered by tile index h * P_w + w. Collective over the neighbours.
torch::Tensor halo_exchange(const torch::Tensor& tile, const HaloPlan& plan,
                            comm::Communicator& spatial);

// Seconds this process has spent in halo exchanges (forward and backward: packing, messages and
// the wait for the slowest neighbour) since it started: the benchmark's halo share.
double halo_exchange_seconds();

// Where this rank's tile sits: a P_h x P_w grid, tile (h, w), and the spatial communicator.
struct TileSpace {
  int ph = 1, pw = 1, h = 0, w = 0;
  comm::Communicator* comm = nullptr;
};

// Conv2d over an image tiled across the spatial group, equal to torch's conv2d on the whole
// image, tile by tile: input [N, C, H/P_h, W/P_w] → output [N, C', H'/P_h, W'/P_w]. Throws
// InvalidArgument (naming sizes that work) when the image or its output does not divide.
torch::Tensor spatial_conv2d(const torch::Tensor& tile, const torch::Tensor& weight,
                             const torch::Tensor& bias, int64_t stride, int64_t padding,
                             int64_t dilation, const TileSpace& space);

// Max and average pooling over the tiled image, equal to torch's max_pool2d / avg_pool2d (with
// count_include_pad, PyTorch's default) on the whole image, tile by tile.
torch::Tensor spatial_max_pool2d(const torch::Tensor& tile, int64_t kernel, int64_t stride,
                                 int64_t padding, int64_t dilation, const TileSpace& space);
torch::Tensor spatial_avg_pool2d(const torch::Tensor& tile, int64_t kernel, int64_t stride,
                                 int64_t padding, const TileSpace& space);

}  // namespace spatial
}  // namespace tessera
