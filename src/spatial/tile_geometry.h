// Tile geometry for spatial decomposition, one image axis at a time (height and width are
// planned alike and independently): which input rows a tile owns, which output rows it computes,
// and which rows it needs from its neighbours (halos) for a sliding-window layer (convolution,
// pooling) of any kernel, stride, dilation and padding. Pure functions, no tensors.
//
// An axis of n inputs is cut into P equal blocks of n/P; the layer's m outputs into P equal
// blocks of m/P. Output block p needs inputs [o*s - q, (o_last)*s - q + d(k-1)]: the part of that
// range inside the image comes from the tile's own block plus halos from its two neighbours; the
// part outside is the layer's zero padding, applied locally by the border tiles only.
//
// Sizes that do not divide, or a halo wider than a neighbour's block, are refused with a message
// naming the sizes that would work (the design forbids assuming equal tiles without checking).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {
namespace spatial {

struct WindowSpec {
  int64_t kernel = 1, stride = 1, dilation = 1, padding = 0;
  std::string describe() const;  // "kernel 3, stride 2, dilation 1, padding 1"
};

// Outputs of the layer on an axis of n inputs (PyTorch's formula); 0 or less when the window
// does not fit.
int64_t window_output_size(int64_t n, const WindowSpec& w);

struct AxisTile {
  int64_t in_lo = 0, in_hi = 0;      // inputs this tile owns, [lo, hi)
  int64_t out_lo = 0, out_hi = 0;    // outputs it computes, [lo, hi)
  int64_t need_lo = 0, need_hi = 0;  // inputs those outputs read, clipped to the image
  int64_t halo_lo = 0, halo_hi = 0;  // inputs received from the previous / next tile
  int64_t skip_lo = 0, skip_hi = 0;  // owned inputs at the start / end that are not read
  int64_t pad_lo = 0, pad_hi = 0;    // the layer's padding this tile applies (border tiles)
};

// The P tiles of an axis of n inputs for the layer. Throws InvalidArgument naming the axis, the
// layer, what does not work and the nearest sizes that do.
std::vector<AxisTile> plan_axis(int64_t n, int parts, const WindowSpec& w,
                                const std::string& axis = "height");

// The same check without throwing: "" when plan_axis would succeed, else why not.
std::string axis_problem(int64_t n, int parts, const WindowSpec& w);

}  // namespace spatial
}  // namespace tessera
