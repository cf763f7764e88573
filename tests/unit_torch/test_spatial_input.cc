// The pure parts of spatial training's input and model checks: which window of a slide a sample
// shows, which part of the slide each tile reads (flips included), and which image sizes cut
// into a grid of tiles through a ResNet.
#include <gtest/gtest.h>

#include <set>

#include "common/error.h"
#include "models/resnet.h"
#include "spatial/spatial_resnet.h"
#include "train/input/slide_input.h"

namespace tessera {
namespace train {
namespace {

TEST(SlideView, TrainingWindowsStayInsideAndVaryEvalIsCentred) {
  std::set<std::pair<int64_t, int64_t>> corners;
  int flips_rows = 0, flips_cols = 0;
  for (int64_t i = 0; i < 200; ++i) {
    const SlideView v = plan_slide_view(7, 3, i, 300, 500, 128, true);
    EXPECT_GE(v.y, 0);
    EXPECT_GE(v.x, 0);
    EXPECT_LE(v.y + 128, 300);
    EXPECT_LE(v.x + 128, 500);
    corners.insert({v.y, v.x});
    flips_rows += v.flip_rows;
    flips_cols += v.flip_cols;
    // The same (seed, epoch, sample) gives the same view on every rank; another epoch another.
    const SlideView again = plan_slide_view(7, 3, i, 300, 500, 128, true);
    EXPECT_EQ(again.y, v.y);
    EXPECT_EQ(again.x, v.x);
    EXPECT_EQ(again.flip_rows, v.flip_rows);
  }
  EXPECT_GT(corners.size(), 150u);
  EXPECT_GT(flips_rows, 60);
  EXPECT_LT(flips_rows, 140);
  EXPECT_GT(flips_cols, 60);
  EXPECT_LT(flips_cols, 140);
  const SlideView e = plan_slide_view(7, 3, 5, 300, 500, 128, false);
  EXPECT_EQ(e.y, 86);
  EXPECT_EQ(e.x, 186);
  EXPECT_FALSE(e.flip_rows || e.flip_cols);
  EXPECT_THROW(plan_slide_view(7, 0, 0, 100, 500, 128, true), InvalidArgument);
}

// Every pixel of the (flipped) window image comes from exactly one tile, read at the right
// place of the slide: tiles assembled = the window read whole and flipped, for every grid and
// flip, on a slide whose pixel values are their coordinates.
TEST(TileRead, TilesReassembleTheFlippedWindow) {
  const int64_t rows = 40, cols = 52, size = 24;
  const torch::Tensor slide = torch::arange(rows * cols, torch::kLong).view({rows, cols});
  for (int ph = 1; ph <= 4; ++ph) {
    for (int pw = 1; pw <= 4; ++pw) {
      if (size % ph != 0 || size % pw != 0) continue;
      const spatial::GridShape g{1, ph, pw};
      for (int flips = 0; flips < 4; ++flips) {
        SlideView v{5, 11, size, (flips & 1) != 0, (flips & 2) != 0};
        torch::Tensor want = slide.narrow(0, v.y, size).narrow(1, v.x, size);
        if (v.flip_rows) want = want.flip(0);
        if (v.flip_cols) want = want.flip(1);
        torch::Tensor got = torch::full({size, size}, -1, torch::kLong);
        for (int h = 0; h < ph; ++h) {
          for (int w = 0; w < pw; ++w) {
            const TileRead t = plan_tile_read(v, g, spatial::GridCoord{0, h, w});
            ASSERT_EQ(t.rows, size / ph);
            ASSERT_EQ(t.cols, size / pw);
            torch::Tensor px = slide.narrow(0, t.y, t.rows).narrow(1, t.x, t.cols);
            if (t.flip_rows) px = px.flip(0);
            if (t.flip_cols) px = px.flip(1);
            got.narrow(0, h * t.rows, t.rows).narrow(1, w * t.cols, t.cols).copy_(px);
          }
        }
        EXPECT_TRUE(torch::equal(got, want)) << ph << "x" << pw << " flips " << flips;
      }
    }
  }
  try {
    plan_tile_read(SlideView{0, 0, 100}, spatial::GridShape{1, 3, 2}, spatial::GridCoord{});
    ADD_FAILURE() << "100 over 3x2 tiles accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("sides that do: 96 or 102"), std::string::npos)
        << e.what();
  }
}

// Through a ResNet (overall stride 32), an image side cuts into P tiles exactly when every
// stride-2 layer's output divides by P: the side is a multiple of 32 * P (one tile: any side).
TEST(ResNetTiling, SidesThatCutAreTheMultiplesOf32TimesTheTiles) {
  for (int depth : {18, 50}) {
    models::ResNetOptions o;
    o.depth = depth;
    o.num_classes = 2;
    models::ResNet net(o);
    for (int p = 1; p <= 4; ++p) {
      for (int64_t side = 32; side <= 32 * 4 * 5; side += 8) {
        const bool want = p == 1 || side % (32 * p) == 0;
        bool ok = true;
        try {
          spatial::check_resnet_tiling(*net, side, p, 1);
          spatial::check_resnet_tiling(*net, side, 1, p);
        } catch (const InvalidArgument&) {
          ok = false;
        }
        EXPECT_EQ(ok, want) << "resnet" << depth << ", side " << side << " over " << p;
      }
    }
    try {
      spatial::check_resnet_tiling(*net, 200, 2, 1);
      ADD_FAILURE();
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("image sizes that work: 192 or 256"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace train
}  // namespace tessera
