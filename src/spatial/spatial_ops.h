// The spatial layers that need more than a halo: a sum over the spatial group (the basis of
// global pooling and of batch statistics), global average pooling, BatchNorm with statistics
// over the group, and bilinear upsampling (which reads one row past its tile).
#pragma once

#include <torch/torch.h>

#include "comm/communicator.h"
#include "spatial/halo_exchange.h"

namespace tessera {
namespace spatial {

// The sum of `x` over the ranks of `comm`, on every rank; differentiable: the gradient of the
// sum is the sum of the gradients (each rank's loss may use it). f32/f64.
torch::Tensor group_sum(const torch::Tensor& x, comm::Communicator& comm);
// Seconds this process has spent in group sums (BatchNorm statistics, global pooling, their
// gradients) since it started, waits for the slowest rank included.
double group_sum_seconds();

// Mean over the whole image of every (sample, channel): [N, C, h, w] tiles → [N, C] on every
// rank of the group. A loss computed from it on every rank counts each sample P times: divide
// that loss by the group's size (each sample then counts once after the gradients are summed).
torch::Tensor spatial_global_avg_pool(const torch::Tensor& tile, const TileSpace& space);

// BatchNorm2d in training mode with the batch statistics of the whole image: over every tile of
// the spatial group (`stats` = the spatial communicator) or also over the data group (`stats` =
// a communicator over both). Updates the running statistics like torch (unbiased variance).
torch::Tensor spatial_batch_norm(const torch::Tensor& tile, const torch::Tensor& weight,
                                 const torch::Tensor& bias, torch::Tensor running_mean,
                                 torch::Tensor running_var, double momentum, double eps,
                                 comm::Communicator& stats);

// Bilinear upsampling by an integer factor, align_corners false (torch's and DeepLab's): equal to
// torch's interpolate on the whole image, tile by tile.
torch::Tensor spatial_upsample_bilinear(const torch::Tensor& tile, int64_t factor,
                                        const TileSpace& space);

}  // namespace spatial
}  // namespace tessera
