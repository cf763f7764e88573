// Spatial decomposition's pure planning: the process grid (coordinates, neighbours, groups) and
// the tile geometry, exhaustively. The geometry is checked by simulation: a 1-D sliding window
// computed by each tile from its own inputs plus the planned halos (taken from its neighbours'
// blocks only) and its planned border padding must equal the whole-axis result, for every size,
// tile count, kernel, stride, dilation and padding in range. Refusals must be genuine, and the
// sizes they suggest must work.
#include <gtest/gtest.h>

#include <set>

#include "common/error.h"
#include "spatial/grid.h"
#include "spatial/halo_plan.h"
#include "spatial/tile_geometry.h"

namespace tessera {
namespace spatial {
namespace {

TEST(SpatialGrid, CoordinatesNeighboursAndGroups) {
  for (int data = 1; data <= 3; ++data) {
    for (int h = 1; h <= 4; ++h) {
      for (int w = 1; w <= 4; ++w) {
        const GridShape g{data, h, w};
        std::set<int> spatial_colors;
        for (int r = 0; r < g.world(); ++r) {
          const GridCoord c = coord_of(g, r);
          ASSERT_EQ(rank_of(g, c), r);
          // The spatial group is consecutive ranks.
          ASSERT_EQ(c.data, r / (h * w));
          ASSERT_EQ(spatial_color(g, r), c.data);
          ASSERT_EQ(data_color(g, r), c.h * w + c.w);
          const auto nb = neighbours(g, r);
          size_t k = 0;
          for (int dh = -1; dh <= 1; ++dh) {
            for (int dw = -1; dw <= 1; ++dw) {
              if (dh == 0 && dw == 0) continue;
              const int n = nb[k++];
              const bool inside = c.h + dh >= 0 && c.h + dh < h && c.w + dw >= 0 && c.w + dw < w;
              if (!inside) {
                ASSERT_EQ(n, -1);
                continue;
              }
              const GridCoord o = coord_of(g, n);
              ASSERT_EQ(o.data, c.data);
              ASSERT_EQ(o.h, c.h + dh);
              ASSERT_EQ(o.w, c.w + dw);
              // Symmetric: I am my neighbour's neighbour in the opposite direction.
              ASSERT_EQ(neighbour(g, n, -dh, -dw), r);
            }
          }
        }
      }
    }
  }
}

TEST(SpatialGrid, ParsingAndTheWorldSize) {
  const GridShape g = parse_grid("2x2", 8);
  EXPECT_EQ(g.data, 2);
  EXPECT_EQ(g.h, 2);
  EXPECT_EQ(g.w, 2);
  EXPECT_EQ(parse_grid("1x3", 3).data, 1);
  for (const char* bad : {"2", "x2", "2x", "0x2", "2x-1", "axb", "2x2x2"}) {
    EXPECT_THROW(parse_grid(bad, 8), InvalidArgument) << bad;
  }
  try {
    parse_grid("2x2", 6);
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("needs a multiple of 4 ranks, but the job has 6"), std::string::npos) << m;
    EXPECT_NE(m.find("1x2, 2x1, 1x3, 3x1, 1x6"), std::string::npos) << m;
  }
  EXPECT_THROW(coord_of(g, 8), InvalidArgument);
  EXPECT_THROW(neighbour(g, 0, 2, 0), InvalidArgument);
}

// out[o] = sum_j wt[j] * x[o*s - q + j*d], x zero outside [0, n).
std::vector<long> window(const std::vector<long>& x, const WindowSpec& w, int64_t lead_pad,
                         int64_t trail_pad) {
  std::vector<long> padded(static_cast<size_t>(lead_pad), 0);
  padded.insert(padded.end(), x.begin(), x.end());
  padded.insert(padded.end(), static_cast<size_t>(trail_pad), 0);
  std::vector<long> out;
  const int64_t len = static_cast<int64_t>(padded.size());
  for (int64_t o = 0; o * w.stride + w.dilation * (w.kernel - 1) < len; ++o) {
    long acc = 0;
    for (int64_t j = 0; j < w.kernel; ++j) {
      acc += (j + 2) * padded[static_cast<size_t>(o * w.stride + j * w.dilation)];
    }
    out.push_back(acc);
  }
  return out;
}

TEST(TileGeometry, EveryTileReproducesTheWholeAxis) {
  int planned = 0, refused = 0;
  for (int64_t n = 1; n <= 40; ++n) {
    std::vector<long> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = 1000 + 7 * i;
    for (int parts = 1; parts <= 4; ++parts) {
      for (int64_t k : {1, 2, 3, 5, 7}) {
        for (int64_t s = 1; s <= 3; ++s) {
          for (int64_t d = 1; d <= 3; ++d) {
            for (int64_t q = 0; q <= 4; ++q) {
              const WindowSpec w{k, s, d, q};
              const std::vector<long> whole = window(x, w, q, q);
              ASSERT_EQ(static_cast<int64_t>(whole.size()),
                        std::max<int64_t>(0, window_output_size(n, w)));
              const std::string problem = axis_problem(n, parts, w);
              if (!problem.empty()) {
                ++refused;
                // A refusal is genuine: unequal blocks, or a tile that cannot be computed from
                // its own block, its neighbours' and border padding.
                const bool uneven = n % parts != 0 || whole.empty() ||
                                    static_cast<int64_t>(whole.size()) % parts != 0;
                if (!uneven) {
                  const int64_t block = n / parts, ob = static_cast<int64_t>(whole.size()) / parts;
                  bool impossible = false;
                  for (int p = 0; p < parts; ++p) {
                    const int64_t lo = p * ob * s - q, hi = (p * ob + ob - 1) * s - q + d * (k - 1);
                    impossible |= std::max<int64_t>(lo, 0) < (p - 1) * block ||
                                  std::min<int64_t>(hi, n - 1) >= (p + 2) * block ||
                                  std::max<int64_t>(lo, 0) >= (p + 1) * block ||
                                  std::min<int64_t>(hi, n - 1) < p * block || (lo < 0 && p != 0) ||
                                  (hi >= n && p != parts - 1);
                  }
                  ASSERT_TRUE(impossible) << "refused without cause: n " << n << ", " << parts
                                          << " tiles, " << w.describe() << ": " << problem;
                }
                continue;
              }
              ++planned;
              const std::vector<AxisTile> tiles = plan_axis(n, parts, w);
              std::vector<long> joined;
              for (int p = 0; p < parts; ++p) {
                const AxisTile& t = tiles[static_cast<size_t>(p)];
                ASSERT_EQ(t.in_hi - t.in_lo, n / parts);
                // Halos come from the neighbours' blocks only, and none at the border.
                ASSERT_LE(t.halo_lo, n / parts);
                ASSERT_LE(t.halo_hi, n / parts);
                ASSERT_TRUE(p != 0 || t.halo_lo == 0);
                ASSERT_TRUE(p != parts - 1 || t.halo_hi == 0);
                // The local buffer: own block extended by the halos, minus the skipped ends.
                const int64_t lo = t.in_lo - t.halo_lo + t.skip_lo,
                              hi = t.in_hi + t.halo_hi - t.skip_hi;
                ASSERT_EQ(lo, t.need_lo);
                ASSERT_EQ(hi, t.need_hi);
                std::vector<long> local(x.begin() + lo, x.begin() + hi);
                const std::vector<long> part =
                    window(local, WindowSpec{k, s, d, 0}, t.pad_lo, t.pad_hi);
                ASSERT_EQ(static_cast<int64_t>(part.size()), t.out_hi - t.out_lo);
                joined.insert(joined.end(), part.begin(), part.end());
              }
              ASSERT_EQ(joined, whole) << "n " << n << ", " << parts << " tiles, " << w.describe();
            }
          }
        }
      }
    }
  }
  std::printf("[ tile geometry ] %d layouts planned and reproduced, %d refused\n", planned,
              refused);
  EXPECT_GT(planned, 5000);
}

TEST(TileGeometry, RefusalsNameTheSizesThatWork) {
  try {
    plan_axis(100, 3, WindowSpec{3, 1, 1, 1}, "height");
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the image height 100 over 3 tiles"), std::string::npos) << m;
    EXPECT_NE(m.find("heights that would work: 99 or 102"), std::string::npos) << m;
  }
  // Stride 2 halves the outputs: 4 tiles need the outputs to divide by 4 too.
  try {
    plan_axis(36, 4, WindowSpec{3, 2, 1, 1}, "width");
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("its 18 outputs do not divide into 4 equal tiles"), std::string::npos) << m;
    EXPECT_NE(m.find("widths that would work: 32 or 40"), std::string::npos) << m;
  }
  // A tile smaller than the halo: 4 inputs per tile, a dilated 7-wide window reaches 9 away.
  try {
    plan_axis(16, 4, WindowSpec{7, 1, 3, 9}, "height");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("beyond its neighbour's tile of 4"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(plan_axis(16, 0, WindowSpec{}, "height"), InvalidArgument);
  EXPECT_THROW(plan_axis(16, 2, WindowSpec{3, 0, 1, 1}, "height"), InvalidArgument);
  // Every suggestion works.
  for (int64_t n = 5; n < 60; ++n) {
    for (int parts = 2; parts <= 4; ++parts) {
      const WindowSpec w{3, 2, 1, 1};
      if (axis_problem(n, parts, w).empty()) continue;
      try {
        plan_axis(n, parts, w);
      } catch (const InvalidArgument& e) {
        const std::string m = e.what();
        const size_t at = m.find("would work: ");
        ASSERT_NE(at, std::string::npos) << m;
        std::istringstream in(m.substr(at + 12));
        int64_t v;
        while (in >> v) {
          EXPECT_TRUE(axis_problem(v, parts, w).empty()) << v << " suggested in: " << m;
          std::string orword;
          in >> orword;
        }
      }
    }
  }
}

TEST(HaloPlan, EverySendMeetsTheNeighboursReceiveAndTheHalosTileTheBuffer) {
  int plans = 0;
  for (int ph = 1; ph <= 3; ++ph) {
    for (int pw = 1; pw <= 3; ++pw) {
      for (const WindowSpec& win :
           {WindowSpec{3, 1, 1, 1}, WindowSpec{5, 1, 1, 2}, WindowSpec{3, 2, 1, 1},
            WindowSpec{3, 1, 2, 2}, WindowSpec{1, 1, 1, 0}, WindowSpec{7, 2, 1, 3}}) {
        const int64_t n = 24;
        if (!axis_problem(n, ph, win).empty() || !axis_problem(n, pw, win).empty()) continue;
        const auto rows = plan_axis(n, ph, win), cols = plan_axis(n, pw, win);
        for (int h = 0; h < ph; ++h) {
          for (int w = 0; w < pw; ++w) {
            ++plans;
            const HaloPlan p = plan_halos(ph, pw, h, w, rows, cols);
            // Own block plus the received rectangles cover the extended buffer exactly once.
            std::vector<int> cover(static_cast<size_t>(p.ext_rows * p.ext_cols), 0);
            auto paint = [&](const Rect& r) {
              for (int64_t i = r.r0; i < r.r1; ++i)
                for (int64_t j = r.c0; j < r.c1; ++j)
                  ++cover[static_cast<size_t>(i * p.ext_cols + j)];
            };
            paint(p.own);
            for (const HaloRegion& r : p.regions) {
              if (r.peer < 0) {
                ASSERT_TRUE(r.send.empty() && r.recv.empty());
                continue;
              }
              paint(r.recv);
              // The neighbour's matching region: it sends me what I receive, same shape and tag.
              const HaloPlan q = plan_halos(ph, pw, h + r.dh, w + r.dw, rows, cols);
              const HaloRegion* back = nullptr;
              for (const HaloRegion& x : q.regions) {
                if (x.dh == -r.dh && x.dw == -r.dw) back = &x;
              }
              ASSERT_NE(back, nullptr);
              ASSERT_EQ(back->peer, h * pw + w);
              ASSERT_EQ(back->send_tag, r.recv_tag);
              ASSERT_EQ(back->send.rows(), r.recv.rows());
              ASSERT_EQ(back->send.cols(), r.recv.cols());
              ASSERT_EQ(back->recv.rows(), r.send.rows());
              ASSERT_EQ(back->recv.cols(), r.send.cols());
            }
            for (int c : cover) ASSERT_EQ(c, 1);
          }
        }
      }
    }
  }
  EXPECT_GT(plans, 50);
}

}  // namespace
}  // namespace spatial
}  // namespace tessera
