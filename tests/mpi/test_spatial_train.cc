// A spatial training step through the engine equals the ordinary one: with the undivided loss on
// every rank of a spatial group, the DistributedOptimizer's one average over all ranks sums the
// gradients over the spatial group (each of its P ranks holds P times its share, through
// group_sum's backward) and averages them over the data group. ResNet-18 in f64, grids
// P_data x 1 x 2 (2 ranks: one image; 4 ranks: two images, BatchNorm statistics over both),
// three SGD steps with momentum against one process with the whole images.
#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "models/resnet.h"
#include "mpi/spatial_test_util.h"
#include "mpi/torch_test_util.h"
#include "spatial/grid.h"
#include "spatial/spatial_resnet.h"

namespace tessera {
namespace spatial {
namespace {

class SpatialTrainTest : public testing::TorchTest {};

TEST_F(SpatialTrainTest, StepThroughTheEngineEqualsTheWholeImageStep) {
  if (size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  const GridShape g{size() / 2, 1, 2};
  std::unique_ptr<comm::Communicator> world = comm::Communicator::world();
  const GridCoord at = coord_of(g, world->rank());
  std::unique_ptr<comm::Communicator> group =
      world->split(spatial_color(g, world->rank()), data_color(g, world->rank()));
  const TileSpace space{g.h, g.w, at.h, at.w, group.get()};

  models::ResNetOptions o;
  o.depth = 18;
  o.num_classes = 5;
  auto [full, tiled] = testing::twin_models<models::ResNet>(o, 3);
  const int64_t side = 64;
  torch::Tensor images = torch::randn({g.data, 3, side, side}, torch::kDouble);
  torch::Tensor labels = torch::arange(g.data, torch::kLong) % 5;

  auto options = torch::optim::SGDOptions(0.05).momentum(0.9);
  torch::optim::SGD ref_sgd(full->parameters(), options);
  torch::optim::SGD sgd(tiled->parameters(), options);
  DistributedOptimizer dopt(sgd, tiled->named_parameters());
  const int64_t bw = side / g.w;
  for (int step = 1; step <= 3; ++step) {
    ref_sgd.zero_grad();
    torch::nn::functional::cross_entropy(full->forward(images), labels).backward();
    ref_sgd.step();

    sgd.zero_grad();
    torch::Tensor tile = images.narrow(0, at.data, 1).narrow(3, at.w * bw, bw).contiguous();
    // BatchNorm over every tile of every image: the whole batch's statistics, as the reference.
    torch::Tensor logits = spatial_resnet_forward(*tiled, tile, space, world.get());
    torch::nn::functional::cross_entropy(logits, labels.narrow(0, at.data, 1)).backward();
    dopt.step();

    double worst = 0;
    auto b = tiled->named_parameters();
    for (const auto& item : full->named_parameters()) {
      const torch::Tensor& want = item.value();
      const double d = (b[item.key()] - want).abs().max().item<double>() /
                       std::max(1e-12, want.abs().max().item<double>());
      EXPECT_LT(d, 1e-10) << item.key() << " after step " << step;
      worst = std::max(worst, d);
    }
    if (rank() == 0) {
      std::printf("[ spatial step ] %dx%dx%d grid, step %d: max relative difference %.3g\n", g.data,
                  g.h, g.w, step, worst);
    }
  }
}

}  // namespace
}  // namespace spatial
}  // namespace tessera
