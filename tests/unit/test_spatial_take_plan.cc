// The take's plan (spatial/take_plan.h), by simulation: on images up to 9x9 over grids up to 3x3,
// with random maps (any rows, repeats, -1 fills, empty tiles), every tile's gather is assembled
// from its own block and the messages its peers' plans send it, and must hold exactly the image
// values its map names; every message one tile plans to send, its peer plans to receive, the same
// shape.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "common/error.h"
#include "spatial/take_plan.h"

namespace tessera {
namespace spatial {
namespace {

AxisMap random_map(int64_t n, int parts, std::mt19937& rng) {
  AxisMap m;
  m.in = n;
  std::uniform_int_distribution<int64_t> len(0, 2 * n), row(-1, n - 1);
  for (int p = 0; p < parts; ++p) {
    std::vector<int64_t> src(static_cast<size_t>(len(rng)));
    for (int64_t& r : src) r = row(rng);
    m.src.push_back(src);
  }
  return m;
}

// The value of image pixel (r, c).
int64_t pixel(int64_t r, int64_t c) { return 100 * r + c; }

void check_grid(const AxisMap& rows, const AxisMap& cols) {
  const int ph = static_cast<int>(rows.src.size()), pw = static_cast<int>(cols.src.size());
  std::vector<TakePlan> plans;
  for (int h = 0; h < ph; ++h) {
    for (int w = 0; w < pw; ++w) plans.push_back(plan_take(rows, cols, h, w));
  }
  for (int me = 0; me < ph * pw; ++me) {
    const TakePlan& p = plans[static_cast<size_t>(me)];
    const size_t nr = p.row.needed.size(), nc = p.col.needed.size();
    std::vector<int64_t> u(nr * nc, -1);
    auto land = [&](const TakeMessage& into, const TakePlan& from, const TakeMessage& sent) {
      ASSERT_EQ(sent.rows.size(), static_cast<size_t>(into.r1 - into.r0));
      ASSERT_EQ(sent.cols.size(), static_cast<size_t>(into.c1 - into.c0));
      for (size_t i = 0; i < sent.rows.size(); ++i) {
        for (size_t j = 0; j < sent.cols.size(); ++j) {
          int64_t& cell = u[static_cast<size_t>(into.r0 + static_cast<int64_t>(i)) * nc +
                            static_cast<size_t>(into.c0 + static_cast<int64_t>(j))];
          ASSERT_EQ(cell, -1) << "a gathered pixel arrived twice";
          cell = pixel(from.row.in_lo + sent.rows[i], from.col.in_lo + sent.cols[j]);
        }
      }
    };
    if (p.own.r1 > p.own.r0 && p.own.c1 > p.own.c0) land(p.own, p, p.own);
    for (const TakeMessage& r : p.recvs) {
      const TakePlan& q = plans[static_cast<size_t>(r.peer)];
      const TakeMessage* sent = nullptr;
      for (const TakeMessage& s : q.sends) {
        if (s.peer == me) sent = &s;
      }
      ASSERT_NE(sent, nullptr) << "tile " << me << " expects from " << r.peer
                               << " what it never sends";
      land(r, q, *sent);
    }
    for (size_t i = 0; i < nr; ++i) {
      for (size_t j = 0; j < nc; ++j) {
        ASSERT_EQ(u[i * nc + j], pixel(p.row.needed[i], p.col.needed[j]));
      }
    }
    // Every message a peer sends me, I receive.
    for (int q = 0; q < ph * pw; ++q) {
      for (const TakeMessage& s : plans[static_cast<size_t>(q)].sends) {
        if (s.peer != me) continue;
        bool expected = false;
        for (const TakeMessage& r : p.recvs) expected = expected || r.peer == q;
        ASSERT_TRUE(expected) << "tile " << q << " sends tile " << me << " what it never receives";
      }
    }
    // The map read back through pos: the rows and columns it names.
    const int h = me / pw, w = me % pw;
    for (size_t j = 0; j < p.row.pos.size(); ++j) {
      const int64_t want = rows.src[static_cast<size_t>(h)][j];
      ASSERT_EQ(p.row.pos[j] < 0 ? -1 : p.row.needed[static_cast<size_t>(p.row.pos[j])], want);
    }
    for (size_t j = 0; j < p.col.pos.size(); ++j) {
      const int64_t want = cols.src[static_cast<size_t>(w)][j];
      ASSERT_EQ(p.col.pos[j] < 0 ? -1 : p.col.needed[static_cast<size_t>(p.col.pos[j])], want);
    }
  }
}

TEST(SpatialTakePlan, EveryTileGathersExactlyWhatItsMapNames) {
  std::mt19937 rng(7);
  int grids = 0;
  for (int64_t n = 1; n <= 9; ++n) {
    for (int ph = 1; ph <= 3; ++ph) {
      for (int pw = 1; pw <= 3; ++pw) {
        for (int trial = 0; trial < 4; ++trial) {
          check_grid(random_map(n, ph, rng), random_map(10 - n, pw, rng));
          if (HasFatalFailure()) return;
          ++grids;
        }
      }
    }
  }
  EXPECT_EQ(grids, 9 * 9 * 4);
}

TEST(SpatialTakePlan, PartsCutEveryAxisOnceAndMapsOutsideTheImageAreRefused) {
  for (int64_t n = 0; n <= 20; ++n) {
    for (int parts = 1; parts <= 6; ++parts) {
      int64_t at = 0;
      for (int p = 0; p < parts; ++p) {
        const auto r = part_range(n, parts, p);
        ASSERT_EQ(r.first, at);
        at = r.second;
      }
      ASSERT_EQ(at, n);
    }
  }
  AxisMap bad;
  bad.in = 4;
  bad.src = {{0, 1}, {4}};
  try {
    plan_axis_take(bad, 0, "width");
    FAIL() << "row 4 of 4 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the width map of tile 1 names row 4 of an image of 4"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace spatial
}  // namespace tessera
