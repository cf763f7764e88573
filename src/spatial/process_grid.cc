#include "spatial/process_grid.h"

#include <algorithm>

namespace tessera {
namespace spatial {

ProcessGrid::ProcessGrid(const std::string& grid) : world_(comm::Communicator::world()) {
  // Every rank parses the same text against the same world size, so a bad grid fails on every
  // rank alike before any message is sent.
  shape_ = parse_grid(grid, world_->size());
  coord_ = coord_of(shape_, world_->rank());
  spatial_ = world_->split(spatial_color(shape_, world_->rank()), shape_.w * coord_.h + coord_.w);
  data_ = world_->split(data_color(shape_, world_->rank()), coord_.data);
}

ProcessGrid::ProcessGrid(const std::string& grid, const std::vector<int>& members) {
  std::unique_ptr<comm::Communicator> all = comm::Communicator::world();
  const int me = all->rank();
  const bool member = std::find(members.begin(), members.end(), me) != members.end();
  world_ = all->split(member ? 0 : -1, me);
  if (!member) return;
  shape_ = parse_grid(grid, world_->size());
  coord_ = coord_of(shape_, world_->rank());
  spatial_ = world_->split(spatial_color(shape_, world_->rank()), shape_.w * coord_.h + coord_.w);
  data_ = world_->split(data_color(shape_, world_->rank()), coord_.data);
}

}  // namespace spatial
}  // namespace tessera
