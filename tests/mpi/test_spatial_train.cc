// Spatial training against one process on the whole images.
//
// A step through the engine: with the undivided loss on every rank of a spatial group, the
// DistributedOptimizer's one average over all ranks sums the gradients over the spatial group
// (each of its P ranks holds P times its share, through group_sum's backward) and averages them
// over the data group. ResNet-18 in f64, grids P_data x 1 x 2 (2 ranks: one image; 4 ranks: two
// images, BatchNorm statistics over both), three SGD steps with momentum.
//
// `tessera train --spatial` (run_training): slides read tile by tile (random windows and flips),
// trained and evaluated by AUC, equal to an ordinary ResNet trained by hand on the whole windows
// read whole; each rank reads about 1/P of the slide files; and bad input (grid, sizes, files)
// fails on every rank with a message naming the sizes or the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "comm/communicator.h"
#include "data/augment.h"
#include "data/dataset.h"
#include "data/make_dataset.h"
#include "data/sampler.h"
#include "data/slide.h"
#include "models/registry.h"
#include "models/resnet.h"
#include "mpi/spatial_test_util.h"
#include "mpi/torch_test_util.h"
#include "mpi/train_test_util.h"
#include "spatial/grid.h"
#include "spatial/spatial_resnet.h"
#include "train/input/slide_input.h"
#include "train/metrics.h"
#include "train/trainer.h"

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

namespace fs = std::filesystem;

class SpatialTrainerTest : public testing::TorchTest {
 protected:
  // Rank 0 writes the slides (once per name), the others wait for them.
  static std::string slides(const std::string& name, int64_t count, int64_t side) {
    const std::string out =
        ::testing::TempDir() + "/tessera_spatial_np" + std::to_string(size()) + "_" + name;
    torch::Tensor failed = torch::zeros({1});
    if (rank() == 0 && !fs::exists(out + "/val.csv")) {
      fs::remove_all(out);
      data::MakeDatasetOptions o;
      o.kind = "slides";
      o.out = out;
      o.size = count;
      o.image_size = side;
      o.val_fraction = 0.375;
      try {
        data::make_dataset(o);
      } catch (const Error& e) {
        ADD_FAILURE() << e.what();
        failed.fill_(1);
      }
    }
    // Every rank learns whether the slides exist, so a failure never leaves the others waiting.
    EXPECT_EQ(allreduce(failed, "sync." + name).item<float>(), 0.0f);
    return out;
  }
  static train::TrainOptions small(const std::string& data, const std::string& grid) {
    train::TrainOptions o;
    o.model = "resnet18";
    o.input.data = data;
    o.input.format = "csv";
    o.spatial = grid;
    o.input.image_size = 128;
    o.input.batch = 2;
    o.schedule.lr = 0.05;
    o.schedule.kind = "constant";
    o.weight_decay = 1e-4;
    o.input.workers = 2;
    o.quiet = true;
    o.log_every = 1;
    o.device = testing::train_test_device();
    return o;
  }
};

// The whole window of sample `i`, read whole and flipped whole: the reference's own reading,
// independent of the tile arithmetic.
torch::Tensor whole_view(const data::DataSet& set, int64_t i, const train::TrainOptions& o,
                         int64_t epoch, bool train) {
  data::SlideReader slide(set.list.samples[static_cast<size_t>(i)].image);
  const train::SlideView v = train::plan_slide_view(o.seed, epoch, i, slide.height(), slide.width(),
                                                    o.input.image_size, train);
  torch::Tensor px = slide.read_region(v.y, v.x, v.size, v.size);
  if (v.flip_rows) px = px.flip(0);
  if (v.flip_cols) px = px.flip(1);
  return data::normalize(px, data::Normalize{});
}

struct Reference {
  std::vector<std::vector<torch::Tensor>> params;  // after each step
  double auc = 0;
};

// One process, the ordinary ResNet on the whole windows of every data group's samples (the
// global batch), SGD with the trainer's settings; then the AUC over the centred val windows.
Reference reference_run(const train::TrainOptions& o, int data_groups, int steps) {
  torch::manual_seed(o.seed);
  models::ModelSpec spec;
  spec.name = o.model;
  spec.num_classes = 2;
  models::Model model = models::make_model(spec);
  torch::nn::Module& net = model.module();
  net.to(torch::kDouble);
  net.train();
  torch::optim::SGD sgd(
      net.parameters(),
      torch::optim::SGDOptions(o.schedule.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  const data::DataSet train = data::open_dataset(o.input.data, data::Format::kCsv, "train");
  data::ShardPlan plan;
  plan.dataset_size = static_cast<int64_t>(train.list.samples.size());
  plan.seed = o.seed;
  plan.ranks = data_groups;
  plan.batch = o.input.batch;
  Reference ref;
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<torch::Tensor> images;
    std::vector<int64_t> labels;
    for (int d = 0; d < data_groups; ++d) {
      for (int64_t i : data::batch_indices(plan, step, d)) {
        images.push_back(whole_view(train, i, o, step / plan.steps_per_epoch(), true));
        labels.push_back(train.list.samples[static_cast<size_t>(i)].label);
      }
    }
    sgd.zero_grad();
    torch::nn::functional::cross_entropy(model.forward(torch::stack(images).to(torch::kDouble)),
                                         torch::tensor(labels, torch::kLong))
        .backward();
    sgd.step();
    std::vector<torch::Tensor> snap;
    for (const auto& p : net.parameters()) snap.push_back(p.detach().clone());
    ref.params.push_back(snap);
  }
  torch::NoGradGuard no_grad;
  net.eval();
  const data::DataSet val = data::open_dataset(o.input.data, data::Format::kCsv, "val");
  std::vector<double> scores;
  std::vector<int64_t> labels;
  for (size_t i = 0; i < val.list.samples.size(); ++i) {
    const torch::Tensor x =
        whole_view(val, static_cast<int64_t>(i), o, 0, false).unsqueeze(0).to(torch::kDouble);
    scores.push_back(torch::softmax(model.forward(x), 1)[0][1].item<double>());
    labels.push_back(val.list.samples[i].label);
  }
  ref.auc = train::roc_auc(scores, labels);
  return ref;
}

TEST_F(SpatialTrainerTest, TrainingOnSlidesEqualsOneProcessOnTheWholeImages) {
  if (size() != 2 && size() != 4) GTEST_SKIP() << "grids of 2 or 4 ranks";
  // 256x256 slides, 128x128 windows: random windows and flips, the same on every tile.
  const std::string data = slides("equal", 16, 256);
  const int steps = 3;
  // 2 ranks: one image over 1x2 and over 2x1. 4 ranks: 2x2, and two data groups of 1x2 with
  // --sync-bn (BatchNorm statistics over both images, as the reference's batch).
  const std::vector<std::string> grids =
      size() == 2 ? std::vector<std::string>{"1x2", "2x1"} : std::vector<std::string>{"2x2", "1x2"};
  for (const std::string& grid : grids) {
    train::TrainOptions o = small(data, grid);
    o.precision = "f64";
    o.steps = steps;
    const GridShape g = parse_grid(grid, size());
    o.sync_bn = g.data > 1;
    o.schedule.base_batch = g.data * o.input.batch;  // the rate is --lr itself
    std::vector<std::vector<torch::Tensor>> got(steps);
    o.on_step = [&](int64_t done, torch::nn::Module& m) {
      for (const auto& p : m.parameters())
        got[done - 1].push_back(p.detach().to(torch::kCPU).clone());
    };
    const train::TrainResult result = train::run_training(o);
    const Reference ref = reference_run(o, g.data, steps);
    double worst = 0;
    for (int s = 0; s < steps; ++s) {
      ASSERT_EQ(got[s].size(), ref.params[s].size());
      for (size_t i = 0; i < got[s].size(); ++i) {
        const double scale = std::max(1e-12, ref.params[s][i].abs().max().item<double>());
        worst = std::max(worst, (got[s][i] - ref.params[s][i]).abs().max().item<double>() / scale);
      }
    }
    EXPECT_LT(worst, 1e-10) << grid;
    EXPECT_EQ(result.metric_name, "auc");
    EXPECT_NEAR(result.metric, ref.auc, 1e-12) << grid;
    if (rank() == 0) {
      std::printf(
          "[ spatial train ] %dx%dx%d grid, %d steps: max relative difference %.3g, "
          "auc %.4f (reference %.4f)\n",
          g.data, g.h, g.w, steps, worst, result.metric, ref.auc);
    }
  }
}

TEST_F(SpatialTrainerTest, EachRankReadsOnlyItsTile) {
  // Windows as large as the slides (512x512, four 256x256 TIFF tiles): a rank of a grid of P
  // tiles reads the TIFF tiles under its own tile, about 1/P of each file.
  const int tiles = size() == 4 ? 4 : 2;
  const std::string data = slides("tile", 6, 512);
  train::TrainOptions o = small(data, tiles == 4 ? "2x2" : "1x2");
  if (size() != tiles) GTEST_SKIP() << "2 or 4 ranks";
  o.input.image_size = 512;
  o.input.batch = 1;
  o.steps = 2;
  const train::TrainResult r = train::run_training(o);
  ASSERT_GT(r.slide_file_bytes, 0u);
  const double share =
      static_cast<double>(r.slide_bytes_read) / static_cast<double>(r.slide_file_bytes);
  EXPECT_GT(share, 1.0 / tiles - 0.05);
  EXPECT_LT(share, 1.0 / tiles + 0.05);
  if (rank() == 0) {
    std::printf("[ spatial read ] %d tiles: rank 0 read %.1f%% of the slide files it used\n", tiles,
                100.0 * share);
  }
}

TEST_F(SpatialTrainerTest, BadInputFailsOnEveryRankNamingSizesOrFiles) {
  const std::string data = slides("bad", 8, 256);
  const std::string grid = size() == 4 ? "2x2" : "1x2";
  if (size() != 2 && size() != 4) GTEST_SKIP() << "grids of 2 or 4 ranks";
  train::TrainOptions o = small(data, grid);
  o.steps = 1;

  train::TrainOptions g = o;
  g.spatial = "3x1";
  testing::expect_training_error(g, "--spatial 3x1 needs a multiple of 3 ranks, but the job has");
  g.spatial = "2by2";
  testing::expect_training_error(g, "is not HxW");

  train::TrainOptions big = o;
  big.input.image_size = 512;
  testing::expect_training_error(big, "is 256x256 pixels, smaller than --image-size 512");

  train::TrainOptions odd = o;
  odd.input.image_size = 127;
  testing::expect_training_error(odd, "--image-size 127 does not divide into tiles");

  // Tiles too small for the network's layers: the tile geometry names sizes that work.
  train::TrainOptions tiny = o;
  tiny.input.image_size = 32;
  testing::expect_training_error(tiny, "--image-size 32 does not cut into a");

  train::TrainOptions seg = o;
  seg.model = "deeplabv3plus_resnet18";
  testing::expect_training_error(seg, "--spatial trains classifiers on slides");

  train::TrainOptions synth = o;
  synth.input.data = "synthetic";
  testing::expect_training_error(synth, "--spatial trains on slides");

  // A manifest naming a missing slide and one naming a file that is not a TIFF (each its own
  // folder: a rank may still be reading one manifest while rank 0 would rewrite it).
  const std::string broken =
      ::testing::TempDir() + "/tessera_spatial_np" + std::to_string(size()) + "_broken";
  if (rank() == 0) {
    for (const char* which : {"/missing", "/notes"}) {
      const std::string dir = broken + which;
      fs::create_directories(dir);
      std::ofstream(dir + "/notes.tif") << "not a slide";
      fs::copy_file(data + "/slides/000000.tif", dir + "/good.tif",
                    fs::copy_options::overwrite_existing);
      std::ofstream(dir + "/train.csv") << "good.tif,0\ngood.tif,1\ngood.tif,0\ngood.tif,1\n";
      std::ofstream(dir + "/val.csv")
          << (std::string(which) == "/missing" ? "missing.tif,0\n" : "notes.tif,1\n");
    }
  }
  allreduce(torch::zeros({1}), "sync.broken");
  train::TrainOptions missing = o;
  missing.input.data = broken + "/missing";
  testing::expect_training_error(missing, "missing.tif");
  train::TrainOptions notes = o;
  notes.input.data = broken + "/notes";
  testing::expect_training_error(notes, "notes.tif");
}

}  // namespace
}  // namespace spatial
}  // namespace tessera
