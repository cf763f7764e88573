// What a tile sends to and receives from each of its eight neighbours for one layer (pure):
// rectangles in the tile's own block (what it sends) and in its extended buffer (own block
// framed by the halos, where it receives), with the peer and the message tag. Faces and corners
// alike; a neighbour beyond the image border is peer -1 and its rectangles are empty.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "spatial/grid.h"
#include "spatial/tile_geometry.h"

namespace tessera {
namespace spatial {

struct Rect {
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;  // rows [r0, r1), columns [c0, c1)
  int64_t rows() const { return r1 - r0; }
  int64_t cols() const { return c1 - c0; }
  bool empty() const { return rows() <= 0 || cols() <= 0; }
};

struct HaloRegion {
  int dh = 0, dw = 0;
  int peer = -1;  // the neighbour's index in the spatial group (h * P_w + w), -1: none
  int send_tag = 0, recv_tag = 0;
  Rect send;  // in the own block [0, bh) x [0, bw)
  Rect recv;  // in the extended buffer [0, hl + bh + hh) x [0, wl + bw + wh)
};

struct HaloPlan {
  const AxisTile* row = nullptr;  // this tile's geometry on each axis
  const AxisTile* col = nullptr;
  int64_t ext_rows = 0, ext_cols = 0;  // the extended buffer
  Rect own;                            // where the own block sits in it
  std::array<HaloRegion, 8> regions;   // directions in neighbours() order
};

// The plan of tile (h, w) of a P_h x P_w spatial group, from every tile's geometry per axis
// (plan_axis). `rows` and `cols` must outlive the plan.
HaloPlan plan_halos(int ph, int pw, int h, int w, const std::vector<AxisTile>& rows,
                    const std::vector<AxisTile>& cols);

}  // namespace spatial
}  // namespace tessera
