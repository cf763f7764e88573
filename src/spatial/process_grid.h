// The process grid made real: world = P_data x P_h x P_w over MPI, with the spatial group (the
// ranks sharing one sample, ordered by tile index) and the data group (the ranks at the same tile
// position, ordered by data index) as communicators of their own, so halo and group messages
// never mix with the engine's gradients. grid.h holds the pure arithmetic.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "spatial/grid.h"
#include "spatial/halo_exchange.h"

namespace tessera {
namespace spatial {

class ProcessGrid {
 public:
  // `grid` is "HxW" (P_h x P_w); P_data is what the world size leaves. Collective over every
  // rank. Throws InvalidArgument (the same on every rank) when H*W does not divide the world,
  // naming the grids that would fit.
  explicit ProcessGrid(const std::string& grid);
  // The same over the world ranks `members` only (a process set): still collective over every
  // rank; a rank outside gets a grid with member() false and no communicators.
  ProcessGrid(const std::string& grid, const std::vector<int>& members);

  bool member() const { return spatial_ != nullptr; }

  const GridShape& shape() const { return shape_; }
  const GridCoord& coord() const { return coord_; }
  // The grid's ranks (every rank, or the members), ordered by rank.
  comm::Communicator& world() const { return *world_; }
  comm::Communicator& spatial() const { return *spatial_; }
  comm::Communicator& data() const { return *data_; }
  // Where this rank's tile sits, over the spatial communicator.
  TileSpace space() const {
    return TileSpace{shape_.h, shape_.w, coord_.h, coord_.w, spatial_.get()};
  }

 private:
  GridShape shape_;
  GridCoord coord_;
  std::unique_ptr<comm::Communicator> world_, spatial_, data_;
};

}  // namespace spatial
}  // namespace tessera
