// The process grid of spatial decomposition (Tsaris et al.): world = P_data x P_h x P_w. The
// P_h x P_w ranks that share one sample form its spatial group (consecutive ranks, so a group
// stays on one node when it can); the P_data ranks at the same tile position form a data group
// (they average gradients). Pure functions: no MPI here.
//
//   rank = d * (P_h * P_w) + h * P_w + w       d: data index, (h, w): tile row and column
#pragma once

#include <array>
#include <string>

namespace tessera {
namespace spatial {

struct GridShape {
  int data = 1, h = 1, w = 1;
  int spatial() const { return h * w; }
  int world() const { return data * h * w; }
};

struct GridCoord {
  int data = 0, h = 0, w = 0;
};

// "2x2" or "1x4" (P_h x P_w); the data extent is what the world size leaves. Throws
// InvalidArgument when the text is not HxW with H, W >= 1, or when H*W does not divide `world`
// (naming the grids that would fit).
GridShape parse_grid(const std::string& text, int world);

GridCoord coord_of(const GridShape& g, int rank);
int rank_of(const GridShape& g, const GridCoord& c);

// The rank of the neighbour at offset (dh, dw), each in -1..1, in the same spatial group, or -1
// beyond the image's border (the caller maps it to MPI_PROC_NULL).
int neighbour(const GridShape& g, int rank, int dh, int dw);
// All eight, in the order (dh, dw) = (-1,-1) (-1,0) (-1,1) (0,-1) (0,1) (1,-1) (1,0) (1,1).
std::array<int, 8> neighbours(const GridShape& g, int rank);

// Colours and keys for splitting the world: ranks with the same spatial_color share a sample
// (key: their tile index h * P_w + w); ranks with the same data_color hold the same tile (key:
// their data index).
int spatial_color(const GridShape& g, int rank);
int data_color(const GridShape& g, int rank);

}  // namespace spatial
}  // namespace tessera
