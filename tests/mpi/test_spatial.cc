// Spatial decomposition across ranks: the halo exchange fills every halo cell (faces and corners)
// with its neighbour's value, and the spatial convolution equals torch's convolution on the whole
// image, forward and backward (input-gradient tiles, weight and bias gradients summed over the
// spatial group), and so do max and average pooling, global average pooling with a head,
// BatchNorm with the whole image's statistics and bilinear upsampling, for every grid that fits the
// job (1x2, 2x1, 3x1, 1x3, 2x2, and 1x2 / 2x1 with two data groups at 4 ranks) and a range of
// kernel, stride, dilation and padding.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm/collectives.h"
#include "common/error.h"
#include "mpi/mpi_test_util.h"
#include "mpi/spatial_test_util.h"
#include "spatial/grid.h"
#include "spatial/halo_exchange.h"
#include "spatial/spatial_ops.h"
#include "spatial/spatial_resnet.h"

namespace tessera {
namespace spatial {
namespace {

class SpatialTest : public testing::WorldTest {
 protected:
  // The grids that fit this job, with more than one tile.
  static std::vector<GridShape> grids() {
    std::vector<GridShape> out;
    const int n = world_->size();
    for (int ph = 1; ph <= n; ++ph) {
      for (int pw = 1; pw <= n; ++pw) {
        if (ph * pw > 1 && n % (ph * pw) == 0) out.push_back(GridShape{n / (ph * pw), ph, pw});
      }
    }
    return out;
  }
  // This rank's place and its spatial group's communicator (ranks ordered by tile index).
  struct Place {
    GridShape grid;
    GridCoord at;
    std::unique_ptr<comm::Communicator> comm;
    TileSpace space() const { return TileSpace{grid.h, grid.w, at.h, at.w, comm.get()}; }
  };
  static Place place(const GridShape& g) {
    Place p;
    p.grid = g;
    p.at = coord_of(g, world_->rank());
    p.comm = world_->split(spatial_color(g, world_->rank()), data_color(g, world_->rank()));
    EXPECT_EQ(p.comm->rank(), p.at.h * g.w + p.at.w);
    return p;
  }
  static torch::Tensor tile_of(const torch::Tensor& full, const Place& p) {
    const int64_t bh = full.size(2) / p.grid.h, bw = full.size(3) / p.grid.w;
    return full.narrow(2, p.at.h * bh, bh).narrow(3, p.at.w * bw, bw);
  }
};

TEST_F(SpatialTest, HaloCellsHoldTheirNeighboursValues) {
  if (grids().empty()) GTEST_SKIP() << "needs 2 or more ranks";
  const int64_t H = 12, W = 12;
  // Every cell holds its global index: batch, channel, row, column.
  torch::Tensor full = torch::arange(2 * 3 * H * W, torch::kDouble).reshape({2, 3, H, W});
  for (const GridShape& g : grids()) {
    const Place p = place(g);
    for (const WindowSpec& win : {WindowSpec{5, 1, 1, 2}, WindowSpec{3, 1, 2, 2},
                                  WindowSpec{3, 2, 1, 1}, WindowSpec{3, 1, 1, 0}}) {
      if (!axis_problem(H, g.h, win).empty() || !axis_problem(W, g.w, win).empty()) continue;
      const auto rows = plan_axis(H, g.h, win), cols = plan_axis(W, g.w, win);
      const HaloPlan plan = plan_halos(g.h, g.w, p.at.h, p.at.w, rows, cols);
      const torch::Tensor ext = halo_exchange(tile_of(full, p), plan, *p.comm);
      ASSERT_EQ(ext.size(2), plan.ext_rows);
      ASSERT_EQ(ext.size(3), plan.ext_cols);
      const int64_t row0 = plan.row->in_lo - plan.row->halo_lo;
      const int64_t col0 = plan.col->in_lo - plan.col->halo_lo;
      const torch::Tensor want = full.narrow(2, row0, plan.ext_rows).narrow(3, col0, plan.ext_cols);
      ASSERT_TRUE(torch::equal(ext, want))
          << g.data << "x" << g.h << "x" << g.w << " tile (" << p.at.h << ", " << p.at.w << "), "
          << win.describe() << ": " << (ext - want).abs().max().item<double>();
    }
  }
}

// Every layer setting in f64 (to 1e-12) and in f32 (1e-5: f32 1x1 convolutions take oneDNN,
// the reference torch's own choice); and with an input that needs no gradient (the image at the
// stem), whose weight gradients must still be right.
TEST_F(SpatialTest, ConvolutionEqualsTheWholeImageForwardAndBackward) {
  if (grids().empty()) GTEST_SKIP() << "needs 2 or more ranks";
  const int64_t H = 12, W = 12;
  int checked = 0;
  for (const torch::ScalarType dt : {torch::kDouble, torch::kFloat}) {
    const double tol = dt == torch::kDouble ? 1e-12 : 1e-5;
    const DataType wire = dt == torch::kDouble ? DataType::kFloat64 : DataType::kFloat32;
    for (const bool input_grad : {true, false}) {
      for (const GridShape& g : grids()) {
        const Place p = place(g);
        for (int64_t k : {1, 3, 5}) {
          for (int64_t s : {1, 2}) {
            for (int64_t d : {1, 2}) {
              for (int64_t q : {0, 1, 2}) {
                const WindowSpec win{k, s, d, q};
                if (!axis_problem(H, g.h, win).empty() || !axis_problem(W, g.w, win).empty())
                  continue;
                torch::manual_seed(1000 * k + 100 * s + 10 * d + q);  // the same on every rank
                torch::Tensor x = torch::randn({2, 3, H, W}, dt).requires_grad_(input_grad);
                torch::Tensor w = torch::randn({4, 3, k, k}, dt).requires_grad_();
                torch::Tensor b = torch::randn({4}, dt).requires_grad_();
                const std::vector<int64_t> st = {s, s}, pad = {q, q}, dil = {d, d};
                torch::Tensor out = torch::conv2d(x, w, b, at::IntArrayRef(st),
                                                  at::IntArrayRef(pad), at::IntArrayRef(dil));
                torch::Tensor up = torch::randn(out.sizes(), dt);
                (out * up).sum().backward();

                torch::Tensor xt = tile_of(x.detach(), p).clone().requires_grad_(input_grad);
                torch::Tensor wt = w.detach().clone().requires_grad_();
                torch::Tensor bt = b.detach().clone().requires_grad_();
                torch::Tensor ot = spatial_conv2d(xt, wt, bt, s, q, d, p.space());
                const torch::Tensor want = tile_of(out.detach(), p);
                ASSERT_EQ(ot.sizes(), want.sizes()) << win.describe();
                ASSERT_TRUE(torch::allclose(ot, want, tol, tol)) << win.describe() << " " << dt;
                (ot * tile_of(up, p)).sum().backward();
                if (input_grad) {
                  ASSERT_TRUE(torch::allclose(xt.grad(), tile_of(x.grad(), p), tol, tol))
                      << "input gradient, " << win.describe() << " " << dt;
                } else {
                  ASSERT_FALSE(xt.grad().defined());
                }
                // Weight and bias gradients: each tile holds its share; their sum over the spatial
                // group is the whole image's.
                torch::Tensor gw = wt.grad().contiguous(), gb = bt.grad().contiguous();
                comm::allreduce(*p.comm, gw.data_ptr(), gw.data_ptr(),
                                static_cast<size_t>(gw.numel()), wire);
                comm::allreduce(*p.comm, gb.data_ptr(), gb.data_ptr(),
                                static_cast<size_t>(gb.numel()), wire);
                ASSERT_TRUE(torch::allclose(gw, w.grad(), tol * 100, tol))
                    << "weight, " << win.describe() << " " << dt;
                ASSERT_TRUE(torch::allclose(gb, b.grad(), tol * 100, tol))
                    << "bias, " << win.describe() << " " << dt;
                ++checked;
              }
            }
          }
        }
      }
    }
  }
  if (world_->rank() == 0)
    std::printf("[ spatial conv ] %d grid x layer x dtype settings matched\n", checked);
  EXPECT_GT(checked, 40);
}

TEST_F(SpatialTest, PoolingEqualsTheWholeImageForwardAndBackward) {
  if (grids().empty()) GTEST_SKIP() << "needs 2 or more ranks";
  const int64_t H = 12, W = 12;
  int checked = 0;
  for (const GridShape& g : grids()) {
    const Place p = place(g);
    for (int64_t k : {2, 3}) {
      for (int64_t s : {1, 2}) {
        for (int64_t q = 0; q <= k / 2; ++q) {
          for (int64_t d : {1, 2}) {
            for (bool max : {true, false}) {
              if (!max && d != 1) continue;  // average pooling has no dilation
              const WindowSpec win{k, s, d, q};
              if (!axis_problem(H, g.h, win).empty() || !axis_problem(W, g.w, win).empty())
                continue;
              torch::manual_seed(100 * k + 10 * s + q + (max ? 1000 : 0));
              torch::Tensor x = torch::randn({2, 3, H, W}, torch::kDouble).requires_grad_();
              const std::vector<int64_t> kk = {k, k}, st = {s, s}, pad = {q, q}, dil = {d, d};
              torch::Tensor out =
                  max ? torch::max_pool2d(x, at::IntArrayRef(kk), at::IntArrayRef(st),
                                          at::IntArrayRef(pad), at::IntArrayRef(dil))
                      : torch::avg_pool2d(x, at::IntArrayRef(kk), at::IntArrayRef(st),
                                          at::IntArrayRef(pad));
              torch::Tensor up = torch::randn(out.sizes(), torch::kDouble);
              (out * up).sum().backward();
              torch::Tensor xt = tile_of(x.detach(), p).clone().requires_grad_();
              torch::Tensor ot = max ? spatial_max_pool2d(xt, k, s, q, d, p.space())
                                     : spatial_avg_pool2d(xt, k, s, q, p.space());
              const std::string what = std::string(max ? "max " : "avg ") + win.describe();
              ASSERT_EQ(ot.sizes(), tile_of(out, p).sizes()) << what;
              ASSERT_TRUE(torch::allclose(ot, tile_of(out.detach(), p), 1e-12, 1e-12)) << what;
              (ot * tile_of(up, p)).sum().backward();
              ASSERT_TRUE(torch::allclose(xt.grad(), tile_of(x.grad(), p), 1e-12, 1e-12))
                  << "input gradient, " << what;
              ++checked;
            }
          }
        }
      }
    }
  }
  if (world_->rank() == 0)
    std::printf("[ spatial pooling ] %d grid x layer settings matched\n", checked);
  EXPECT_GT(checked, 5);
}

// Sums a gradient over the spatial group (what the model's one allreduce will do).
torch::Tensor summed(const torch::Tensor& g, comm::Communicator& c) {
  torch::Tensor t = g.contiguous().clone();
  comm::allreduce(c, t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                  DataType::kFloat64);
  return t;
}

TEST_F(SpatialTest, GroupLayersEqualTheWholeImageForwardAndBackward) {
  if (grids().empty()) GTEST_SKIP() << "needs 2 or more ranks";
  const int64_t H = 12, W = 12;
  for (const GridShape& g : grids()) {
    const Place p = place(g);
    const std::string grid = std::to_string(g.h) + "x" + std::to_string(g.w);
    torch::manual_seed(5);
    torch::Tensor x = torch::randn({2, 3, H, W}, torch::kDouble).requires_grad_();
    // Global average pooling and a linear head: every rank computes the head's loss, divided by
    // the group's size, so each sample counts once once the gradients are summed.
    {
      torch::Tensor fc = torch::randn({5, 3}, torch::kDouble).requires_grad_();
      torch::Tensor up = torch::randn({2, 5}, torch::kDouble);
      (torch::linear(x.mean({2, 3}), fc) * up).sum().backward();
      torch::Tensor xt = tile_of(x.detach(), p).clone().requires_grad_();
      torch::Tensor ft = fc.detach().clone().requires_grad_();
      torch::Tensor pooled = spatial_global_avg_pool(xt, p.space());
      ASSERT_TRUE(torch::allclose(pooled, x.detach().mean({2, 3}), 1e-12, 1e-12)) << grid;
      ((torch::linear(pooled, ft) * up).sum() / p.comm->size()).backward();
      ASSERT_TRUE(torch::allclose(xt.grad(), tile_of(x.grad(), p), 1e-12, 1e-12)) << grid;
      ASSERT_TRUE(torch::allclose(summed(ft.grad(), *p.comm), fc.grad(), 1e-12, 1e-12)) << grid;
      x.mutable_grad().reset();
    }
    // BatchNorm with the whole image's batch statistics.
    {
      torch::Tensor w = torch::randn({3}, torch::kDouble).requires_grad_();
      torch::Tensor b = torch::randn({3}, torch::kDouble).requires_grad_();
      torch::Tensor rm = torch::zeros({3}, torch::kDouble), rv = torch::ones({3}, torch::kDouble);
      torch::Tensor out = torch::batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5, false);
      torch::Tensor up = torch::randn(out.sizes(), torch::kDouble);
      (out * up).sum().backward();
      torch::Tensor xt = tile_of(x.detach(), p).clone().requires_grad_();
      torch::Tensor wt = w.detach().clone().requires_grad_(),
                    bt = b.detach().clone().requires_grad_();
      torch::Tensor rmt = torch::zeros({3}, torch::kDouble), rvt = torch::ones({3}, torch::kDouble);
      torch::Tensor ot = spatial_batch_norm(xt, wt, bt, rmt, rvt, 0.1, 1e-5, *p.comm);
      ASSERT_TRUE(torch::allclose(ot, tile_of(out.detach(), p), 1e-10, 1e-10)) << grid;
      (ot * tile_of(up, p)).sum().backward();
      ASSERT_TRUE(torch::allclose(xt.grad(), tile_of(x.grad(), p), 1e-9, 1e-10)) << grid;
      ASSERT_TRUE(torch::allclose(summed(wt.grad(), *p.comm), w.grad(), 1e-10, 1e-10)) << grid;
      ASSERT_TRUE(torch::allclose(summed(bt.grad(), *p.comm), b.grad(), 1e-10, 1e-10)) << grid;
      ASSERT_TRUE(torch::allclose(rmt, rm, 1e-12, 1e-12)) << grid;
      ASSERT_TRUE(torch::allclose(rvt, rv, 1e-12, 1e-12)) << grid;
      x.mutable_grad().reset();
    }
    // Bilinear upsampling (align_corners false) by 2 and 4.
    for (int64_t f : {2, 4}) {
      const std::vector<int64_t> size = {H * f, W * f};
      torch::Tensor out = torch::upsample_bilinear2d(x, at::IntArrayRef(size), false);
      torch::Tensor up = torch::randn(out.sizes(), torch::kDouble);
      (out * up).sum().backward();
      torch::Tensor xt = tile_of(x.detach(), p).clone().requires_grad_();
      torch::Tensor ot = spatial_upsample_bilinear(xt, f, p.space());
      ASSERT_TRUE(torch::allclose(ot, tile_of(out.detach(), p), 1e-12, 1e-12)) << grid << " x" << f;
      (ot * tile_of(up, p)).sum().backward();
      ASSERT_TRUE(torch::allclose(xt.grad(), tile_of(x.grad(), p), 1e-12, 1e-12))
          << grid << " x" << f;
      x.mutable_grad().reset();
    }
  }
}

// The whole model: the spatial ResNet's forward and backward against the ordinary model on the
// whole image: logits, every parameter's gradient (summed over the spatial group) and every
// BatchNorm running statistic. Returns the largest relative difference.
//
// Tolerances (f64), each about 100 times the largest relative difference measured at 2, 3 and
// 4 ranks on every grid (the "[ spatial ... ]" lines): ResNet-18 2.8e-14, ResNet-50 on 512 x 512
// 1.65e-12, DeepLab-v3+'s gradients 1.56e-11. The runs differ only in the order of additions.
constexpr double kResNet18Tolerance = 3e-12;
constexpr double kResNet50Tolerance = 2e-10;
constexpr double kDeepLabTolerance = 2e-9;
double resnet_difference(int depth, const TileSpace& space, int64_t height, int64_t width, int ph,
                         int pw, int h, int w, torch::ScalarType dtype = torch::kDouble,
                         int64_t batch = 2, double tolerance = kResNet18Tolerance) {
  models::ResNetOptions o;
  o.depth = depth;
  o.num_classes = 5;
  auto [full, tiled] = testing::twin_models<models::ResNet>(o, 11, dtype);
  const torch::Device dev = testing::spatial_test_device();
  full->to(dev);
  tiled->to(dev);
  torch::Tensor x = torch::randn({batch, 3, height, width}, dtype).to(dev);
  torch::Tensor up = torch::randn({batch, 5}, dtype).to(dev);
  torch::Tensor logits = full->forward(x);
  (logits * up).sum().backward();
  const int64_t bh = height / ph, bw = width / pw;
  torch::Tensor tile = x.narrow(2, h * bh, bh).narrow(3, w * bw, bw).contiguous();
  torch::Tensor lt = spatial_resnet_forward(*tiled, tile, space);
  const int group = ph * pw;
  ((lt * up).sum() / group).backward();
  double worst = (lt - logits).abs().max().item<double>() / logits.abs().max().item<double>();
  auto a = full->named_parameters(), b = tiled->named_parameters();
  for (const auto& item : a) {
    torch::Tensor gsum = b[item.key()].grad().to(torch::kCPU).contiguous().clone();
    comm::allreduce(*space.comm, gsum.data_ptr(), gsum.data_ptr(),
                    static_cast<size_t>(gsum.numel()),
                    dtype == torch::kDouble ? DataType::kFloat64 : DataType::kFloat32);
    const torch::Tensor want = item.value().grad().to(torch::kCPU);
    const double scale = std::max(1e-12, want.abs().max().item<double>());
    const double d = (gsum - want).abs().max().item<double>() / scale;
    EXPECT_LT(d, tolerance) << item.key();
    worst = std::max(worst, d);
  }
  auto fa = full->named_buffers(), fb = tiled->named_buffers();
  for (const auto& item : fa) {
    EXPECT_TRUE(torch::allclose(fb[item.key()].to(torch::kCPU, torch::kDouble),
                                item.value().to(torch::kCPU, torch::kDouble), tolerance, tolerance))
        << item.key();
  }
  return worst;
}

TEST_F(SpatialTest, ResNetEqualsTheOrdinaryModelOnTheWholeImage) {
  if (grids().empty()) GTEST_SKIP() << "needs 2 or more ranks";
  for (const GridShape& g : grids()) {
    const Place p = place(g);
    // 32 x P per side keeps every stage's output divisible (ResNet halves the size five times).
    const double d =
        resnet_difference(18, p.space(), 32 * g.h * 2, 32 * g.w * 2, g.h, g.w, p.at.h, p.at.w);
    if (world_->rank() == 0) {
      std::printf(
          "[ spatial resnet18 ] %dx%dx%d grid, %lldx%lld image: max relative difference %.3g\n",
          g.data, g.h, g.w, static_cast<long long>(64 * g.h), static_cast<long long>(64 * g.w), d);
    }
    EXPECT_LT(d, kResNet18Tolerance);
  }
}

TEST_F(SpatialTest, ResNet50On512x512MatchesOnATwoByTwoGrid) {
  if (world_->size() != 4) GTEST_SKIP() << "runs on 4 ranks (a 2x2 grid)";
  const Place p = place(GridShape{1, 2, 2});
  // The check was 1e-4 relative; the f64 runs agree far closer (kResNet50Tolerance). In
  // f64: in f32 the
  // ordinary model's own gradients move by percents under a different summation order (50
  // BatchNorm layers in training mode on one image amplify the last bits; 0.2 measured here),
  // so f32 could not tell a wrong halo from rounding.
  const double d = resnet_difference(50, p.space(), 512, 512, 2, 2, p.at.h, p.at.w, torch::kDouble,
                                     1, kResNet50Tolerance);
  if (world_->rank() == 0) {
    std::printf("[ spatial resnet50 ] 2x2 grid, 512x512 image, f64: max relative difference %.3g\n",
                d);
  }
  EXPECT_LT(d, kResNet50Tolerance);
}

TEST_F(SpatialTest, DeepLabEqualsTheOrdinaryModelOnTheWholeImage) {
  if (world_->size() != 2) GTEST_SKIP() << "runs on 2 ranks (1x2 and 2x1)";
  // 576 = 16 * 18 * 2: the ASPP's rate-18 branch on 36 x 36 features, 18 per tile.
  const int64_t side = 576;
  for (const GridShape& g : {GridShape{1, 1, 2}, GridShape{1, 2, 1}}) {
    const Place p = place(g);
    models::DeepLabOptions o;
    o.depth = 18;
    o.num_classes = 3;
    o.aspp_channels = 16;  // the names and structure of the real head, at a test's cost
    auto [full, tiled] = testing::twin_models<models::DeepLabV3Plus>(o, 21);
    torch::Tensor x = torch::randn({2, 3, side, side}, torch::kDouble);
    torch::Tensor y = torch::randint(3, {2, side, side}, torch::kLong);
    y.masked_fill_(torch::rand({2, side, side}) < 0.2, 255);  // some ignored pixels
    torch::Tensor logits = full->forward(x);
    torch::Tensor loss = torch::nn::functional::cross_entropy(
        logits, y, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(255));
    loss.backward();

    const int64_t bh = side / g.h, bw = side / g.w;
    auto cut = [&](const torch::Tensor& t) {
      return t.narrow(t.dim() - 2, p.at.h * bh, bh)
          .narrow(t.dim() - 1, p.at.w * bw, bw)
          .contiguous();
    };
    torch::Tensor lt = spatial_deeplab_forward(*tiled, cut(x), p.space());
    const double scale = logits.abs().max().item<double>();
    EXPECT_LT((lt - cut(logits.detach())).abs().max().item<double>() / scale, 1e-10);
    torch::Tensor lr = spatial_segmentation_loss(lt, cut(y), p.space());
    // The group's losses summed, over its size: the whole image's mean (docs/spatial.md).
    torch::Tensor total = lr.detach().reshape({1}).clone();
    comm::allreduce(*p.comm, total.data_ptr(), total.data_ptr(), 1, DataType::kFloat64);
    EXPECT_NEAR(total.item<double>() / p.comm->size(), loss.item<double>(), 1e-12);
    (lr / p.comm->size()).backward();  // the sum convention, to compare summed gradients
    double worst = 0;
    auto b = tiled->named_parameters();
    for (const auto& item : full->named_parameters()) {
      const torch::Tensor gsum = summed(b[item.key()].grad(), *p.comm);
      const torch::Tensor& want = item.value().grad();
      const double d = (gsum - want).abs().max().item<double>() /
                       std::max(1e-12, want.abs().max().item<double>());
      EXPECT_LT(d, kDeepLabTolerance) << item.key();
      worst = std::max(worst, d);
    }
    if (world_->rank() == 0) {
      std::printf("[ spatial deeplab ] %dx%d grid, %lldx%lld image: gradients within %.3g\n", g.h,
                  g.w, static_cast<long long>(side), static_cast<long long>(side), worst);
    }
  }
}

TEST_F(SpatialTest, SizesThatDoNotDivideAreRefusedNamingOnesThatDo) {
  if (grids().empty()) GTEST_SKIP() << "needs 2 or more ranks";
  const GridShape g = grids().front();
  const Place p = place(g);
  // A tile of 5 rows or columns: 5 * P is odd for P = 1 or 3, and stride 2 then leaves outputs
  // that cannot divide evenly; for P = 2 or 4 the 10 or 20 inputs' outputs do not divide either.
  torch::Tensor x = torch::zeros({1, 1, 5, 5}, torch::kDouble);
  torch::Tensor w = torch::zeros({1, 1, 3, 3}, torch::kDouble);
  try {
    spatial_conv2d(x, w, torch::Tensor(), 2, 1, 1, p.space());
    ADD_FAILURE() << "expected a refusal";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("would work"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spatial
}  // namespace tessera
