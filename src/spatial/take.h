// The take of take_plan.h as an autograd function: each tile of the spatial group builds its
// input for a layer from the image rows and columns its maps name, gathered from the tiles that
// own them. Backward sends the gradient of every gathered row back to its owner, which adds it to
// its tile's gradient. The general form of halo_exchange.h (which the C++ models use on equal
// tiles and neighbour halos): any tile sizes, any reach, any padding mode.
#pragma once

#include <torch/torch.h>

#include "comm/communicator.h"
#include "spatial/take_plan.h"

namespace tessera {
namespace spatial {

// [N, C, rows.src[h].size(), cols.src[w].size()] from tile (h, w)'s block [N, C, bh, bw] (its
// part_range on each axis); rows and columns mapped to -1 hold `fill`. Collective over the tiles
// that exchange rows with this one; `spatial` orders its ranks by tile index h * P_w + w.
torch::Tensor spatial_take(const torch::Tensor& tile, const AxisMap& rows, const AxisMap& cols,
                           int h, int w, double fill, comm::Communicator& spatial);

// Seconds this process has spent in takes (both directions, waits for peers included).
double take_seconds();

}  // namespace spatial
}  // namespace tessera
