#include "spatial/grid.h"

#include <cstdlib>
#include <sstream>

#include "common/error.h"

namespace tessera {
namespace spatial {
namespace {

// The grids H x W whose size divides `world`, for error messages: "1x1, 1x2, 2x1, ...".
std::string fitting_grids(int world) {
  std::ostringstream os;
  bool first = true;
  for (int s = 1; s <= world; ++s) {
    if (world % s != 0) continue;
    for (int h = 1; h <= s; ++h) {
      if (s % h != 0) continue;
      os << (first ? "" : ", ") << h << "x" << s / h;
      first = false;
    }
  }
  return os.str();
}

int parse_extent(const std::string& text, const std::string& part) {
  char* end = nullptr;
  const long v = std::strtol(part.c_str(), &end, 10);
  TESSERA_CHECK(!part.empty() && *end == '\0' && v >= 1 && v <= 1 << 16, "--spatial '", text,
                "' is not HxW with whole numbers >= 1 (e.g. 2x2, 1x4)");
  return static_cast<int>(v);
}

}  // namespace

GridShape parse_grid(const std::string& text, int world) {
  TESSERA_CHECK(world >= 1, "the world size must be >= 1, got ", world);
  const size_t x = text.find('x');
  TESSERA_CHECK(x != std::string::npos, "--spatial '", text,
                "' is not HxW with whole numbers >= 1 (e.g. 2x2, 1x4)");
  GridShape g;
  g.h = parse_extent(text, text.substr(0, x));
  g.w = parse_extent(text, text.substr(x + 1));
  TESSERA_CHECK(world % g.spatial() == 0, "--spatial ", g.h, "x", g.w, " needs a multiple of ",
                g.spatial(), " ranks, but the job has ", world, "; grids that fit ", world,
                " ranks: ", fitting_grids(world));
  g.data = world / g.spatial();
  return g;
}

GridCoord coord_of(const GridShape& g, int rank) {
  TESSERA_CHECK(rank >= 0 && rank < g.world(), "rank ", rank, " is outside the grid of ",
                g.world());
  GridCoord c;
  c.data = rank / g.spatial();
  c.h = (rank % g.spatial()) / g.w;
  c.w = rank % g.w;
  return c;
}

int rank_of(const GridShape& g, const GridCoord& c) {
  TESSERA_CHECK(c.data >= 0 && c.data < g.data && c.h >= 0 && c.h < g.h && c.w >= 0 && c.w < g.w,
                "grid coordinate (", c.data, ", ", c.h, ", ", c.w, ") is outside ", g.data, "x",
                g.h, "x", g.w);
  return c.data * g.spatial() + c.h * g.w + c.w;
}

int neighbour(const GridShape& g, int rank, int dh, int dw) {
  TESSERA_CHECK(dh >= -1 && dh <= 1 && dw >= -1 && dw <= 1, "a neighbour offset is -1, 0 or 1");
  GridCoord c = coord_of(g, rank);
  c.h += dh;
  c.w += dw;
  if (c.h < 0 || c.h >= g.h || c.w < 0 || c.w >= g.w) return -1;
  return rank_of(g, c);
}

std::array<int, 8> neighbours(const GridShape& g, int rank) {
  std::array<int, 8> out{};
  size_t k = 0;
  for (int dh = -1; dh <= 1; ++dh) {
    for (int dw = -1; dw <= 1; ++dw) {
      if (dh != 0 || dw != 0) out[k++] = neighbour(g, rank, dh, dw);
    }
  }
  return out;
}

int spatial_color(const GridShape& g, int rank) { return coord_of(g, rank).data; }

int data_color(const GridShape& g, int rank) {
  const GridCoord c = coord_of(g, rank);
  return c.h * g.w + c.w;
}

}  // namespace spatial
}  // namespace tessera
