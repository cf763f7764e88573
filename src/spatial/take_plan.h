// The general tile movement of spatial decomposition (pure). On an image cut into tiles that need
// not be equal, nor wide enough for a neighbour's halo, each tile builds its input for a layer
// from rows of the whole image named by a map: a convolution's or pooling window's span (padding
// of any mode is the row that mode copies, or -1 for a fill value), the rows nearest or bilinear
// interpolation reads, a transposed convolution's span. Rows and columns are mapped separately.
// take.h moves the rows between the tiles; the Python partitioner (tessera.torch.spatial) writes
// the maps.
//
// An axis of n rows over P tiles: tile p owns [p*n/P, (p+1)*n/P) (floors): equal tiles when P
// divides n. A tile's map names, for each row it builds, the image row to copy or -1 (the fill
// value). The distinct rows it names are gathered, in ascending order, from whichever tiles own
// them (any distance away); row j is then row pos[j] of that gather.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera {
namespace spatial {

// Rows [lo, hi) of tile p of P on an axis of n.
std::pair<int64_t, int64_t> part_range(int64_t n, int parts, int p);

// One axis: `in` image rows; src[p] lists the image row (or -1) of each row tile p builds.
struct AxisMap {
  int64_t in = 0;
  std::vector<std::vector<int64_t>> src;
};

// One axis of the plan, seen from tile p.
struct AxisTake {
  int64_t in_lo = 0, in_hi = 0;  // image rows this tile owns
  std::vector<int64_t> needed;   // the distinct image rows its map names, ascending
  std::vector<int64_t> pos;      // per row it builds: its row in `needed`, or -1 (fill)
  // Per tile q: the run [lo, hi) of `needed` that tile q owns, and the rows of this tile's block
  // (offsets from in_lo) that q's map names, ascending.
  std::vector<std::pair<int64_t, int64_t>> from;
  std::vector<std::vector<int64_t>> to;
};

// Throws InvalidArgument naming the axis when the map has no list per tile or names a row
// outside the image.
AxisTake plan_axis_take(const AxisMap& map, int p, const std::string& axis = "height");

// A message of the take: rows x cols of the sender's block (offsets), landing in the receiver's
// gather at [r0, r1) x [c0, c1).
struct TakeMessage {
  int peer = -1;  // the other tile's index h * P_w + w in the spatial group
  std::vector<int64_t> rows, cols;
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
};

struct TakePlan {
  AxisTake row, col;
  // What tile (h, w) sends each peer (rows, cols) and receives from it (r0..c1), for the peers
  // with something either way; `own` is its own block's share of its gather.
  std::vector<TakeMessage> sends, recvs;
  TakeMessage own;
};

TakePlan plan_take(const AxisMap& rows, const AxisMap& cols, int h, int w);

}  // namespace spatial
}  // namespace tessera
