// The input pipeline across ranks: the global reshuffle moves samples between ranks without
// reading a file; training on files with either shuffle reads nothing after the first epoch; with
// the global shuffle N ranks with batch b match one process with batch N*b step for step (also
// across an epoch boundary, where the ranks exchange samples); corrupt files under and over the
// limit; bad data sets are the same error on every rank.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "comm/collectives.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "data/dataset.h"
#include "data/make_dataset.h"
#include "data/reshuffle.h"
#include "mpi/torch_test_util.h"
#include "mpi/train_test_util.h"
#include "train/input/input.h"
#include "train/trainer.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

class DataTest : public testing::TorchTest {
 protected:
  // Rank 0 writes the data set (once per name), the others wait for it.
  static std::string dataset(const std::string& kind, const std::string& name, int64_t size,
                             int64_t image_size = 40) {
    const std::string out =
        ::testing::TempDir() + "/tessera_data_np" + std::to_string(n()) + "_" + name;
    if (r() == 0) {
      fs::remove_all(out);
      data::MakeDatasetOptions o;
      o.kind = kind;
      o.out = out;
      o.size = size;
      o.image_size = image_size;
      data::make_dataset(o);
    }
    allreduce(torch::zeros({1}), "sync." + name);
    return out;
  }
  static train::TrainOptions small(const std::string& data, const std::string& format) {
    train::TrainOptions o;
    o.model = format == "voc" ? "deeplabv3plus_resnet18" : "resnet18";
    o.input.data = data;
    o.input.format = format;
    o.input.image_size = 32;
    o.input.batch = 2;
    o.schedule.lr = 0.2;
    o.schedule.base_batch = 64;
    o.quiet = true;
    o.log_every = 5;
    return o;
  }
};

std::string file_bytes(const std::string& path) {
  std::vector<char> b = read_file(path);
  return std::string(b.begin(), b.end());
}

TEST_F(DataTest, GlobalReshuffleMovesSamplesWithoutReadingFiles) {
  const data::DataSet d =
      data::open_dataset(dataset("shapes", "reshuffle", 50), data::Format::kVoc, "train");
  const int64_t size = static_cast<int64_t>(d.list.samples.size());
  const data::Exchange exchange = train::world_exchange("test.reshuffle");
  data::ShardedStore store(d.list, data::global_shuffle_shard(size, 3, 0, r(), n()));
  store.load_all();
  const uint64_t read = store.file_bytes_read();
  for (int64_t epoch = 1; epoch <= 3; ++epoch) {
    const uint64_t before = data::process_read_bytes();
    const data::ReshuffleStats s = data::global_reshuffle(exchange, store, 3, epoch);
    const uint64_t during = data::process_read_bytes() - before;
    EXPECT_LT(during, 16384u) << during << " bytes read during the reshuffle";  // a file is ~3 KiB
    EXPECT_EQ(store.file_bytes_read(), read);
    ASSERT_EQ(store.indices(), data::global_shuffle_shard(size, 3, epoch, r(), n()));
    EXPECT_EQ(s.samples_kept + s.samples_received, static_cast<int64_t>(store.size()));
    if (n() > 1) {
      EXPECT_GT(s.samples_received, 0);
    }
    for (size_t i = 0; i < store.size(); ++i) {
      ASSERT_EQ(store.image_bytes(i), file_bytes(store.sample(i).image)) << store.sample(i).image;
      ASSERT_EQ(store.mask_bytes(i), file_bytes(store.sample(i).mask)) << store.sample(i).mask;
    }
    EXPECT_EQ(store.file_bytes_read(), read);  // the checks above came from memory
    // Every sample is held by exactly one rank.
    torch::Tensor held = torch::zeros({size}, torch::kInt);
    for (int64_t g : store.indices()) held[g] = 1;
    held = allreduce(held, "held.e" + std::to_string(epoch), ReduceOp::kSum);
    EXPECT_TRUE(held.eq(1).all().item<bool>());
  }
}

// Proved from outside the store: once every rank has trained on its first epoch, rank 0 renames
// every training image and mask, and training must still finish its three epochs (with no
// tolerance for unreadable files), so no rank read a training file after its first epoch,
// whether through the store or around it. The store's own counter must agree.
TEST_F(DataTest, TrainingOnFilesReadsNothingAfterTheFirstEpoch) {
  const std::string root = dataset("shapes", "train", 40);
  const data::DataSet d = data::open_dataset(root, data::Format::kVoc, "train");
  auto move_files = [&](const std::string& from, const std::string& to) {
    if (r() != 0) return;
    for (const data::Sample& s : d.list.samples) {
      fs::rename(s.image + from, s.image + to);
      fs::rename(s.mask + from, s.mask + to);
    }
  };
  const int64_t per_epoch = 36 / n() / 2;
  for (bool global : {false, true}) {
    const std::string what = global ? "global shuffle" : "local shuffle";
    train::TrainOptions o = small(root, "voc");
    o.input.global_shuffle = global;
    o.epochs = 3;
    o.input.max_corrupt = 0;
    bool moved = false;
    o.on_step = [&](int64_t done, torch::nn::Module&) {
      if (done != per_epoch) return;
      allreduce(torch::zeros({1}), "sync.epoch1.done");  // every rank has its first epoch
      move_files("", ".gone");
      allreduce(torch::zeros({1}), "sync.epoch1.moved");
      moved = true;
    };
    train::TrainResult res;
    try {
      res = train::run_training(o);
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": training read a file after its first epoch: " << e.what();
    }
    allreduce(torch::zeros({1}), "sync.trained");
    if (moved) move_files(".gone", "");
    allreduce(torch::zeros({1}), "sync.restored");
    EXPECT_TRUE(moved) << what;
    EXPECT_EQ(res.steps, 3 * per_epoch) << what;
    EXPECT_EQ(res.file_bytes_after_first_epoch, 0u) << what;
    EXPECT_TRUE(std::isfinite(res.final_loss));
    EXPECT_GE(res.metric, 0.0);
  }
}

std::vector<torch::Tensor> snapshot(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

TEST_F(DataTest, GlobalShuffleRanksMatchOneProcessAcrossEpochs) {
  if (n() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  // 18 training samples: 18 / (N*2) steps per epoch; 7 steps cross at least one epoch boundary,
  // where the ranks exchange their samples.
  train::TrainOptions o = small(dataset("classes", "equiv", 20, 36), "folder");
  o.input.global_shuffle = true;
  o.sync_bn = true;
  o.precision = "f64";
  o.steps = 7;
  o.input.workers = 3;
  // By step: the runs differ only in the order of additions, which ResNet-18's BatchNorm over a
  // few values per channel amplifies 10 to 40 times a step. Measured (largest over 2 and 3
  // ranks): 7.9e-14, 1.0e-11, 3.5e-10, 6.6e-9, 1.6e-8, 2.0e-7, 2.6e-7; each tolerance is 100
  // times that, rounded up to a power of ten.
  constexpr double kTolerance[] = {0, 1e-11, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-4};
  std::vector<std::vector<torch::Tensor>> dist(8), ref(8);
  o.on_step = [&](int64_t done, torch::nn::Module& m) { dist[done] = snapshot(m); };
  train::run_training(o);
  if (r() == 0) {
    train::TrainOptions one = o;
    one.local_only = true;
    one.sync_bn = false;
    one.input.batch = o.input.batch * n();
    one.input.workers = 1;
    one.on_step = [&](int64_t done, torch::nn::Module& m) { ref[done] = snapshot(m); };
    train::run_training(one);
    for (int s = 1; s <= 7; ++s) {
      ASSERT_FALSE(dist[s].empty() || ref[s].empty()) << "no callback after step " << s;
      double worst = 0;
      for (size_t i = 0; i < ref[s].size(); ++i) {
        const double scale = std::max(1e-8, ref[s][i].abs().max().item<double>());
        worst = std::max(worst, (dist[s][i] - ref[s][i]).abs().max().item<double>() / scale);
      }
      EXPECT_LT(worst, kTolerance[s]) << "step " << s;
      std::printf("[ files equivalence ] %d ranks, step %d: max relative difference %.3g\n", n(), s,
                  worst);
    }
  }
}

TEST_F(DataTest, CorruptFilesUnderTheLimitAreSkippedOverItStop) {
  const std::string root = dataset("shapes", "corrupt", 60);
  const data::DataSet d = data::open_dataset(root, data::Format::kVoc, "train");  // 54 samples
  const std::string cut = d.list.samples[10].image;
  if (r() == 0) {
    const std::string bytes = file_bytes(cut);
    std::ofstream(cut, std::ios::binary | std::ios::trunc).write(bytes.data(), 100);
  }
  allreduce(torch::zeros({1}), "sync.cut");
  train::TrainOptions o = small(root, "voc");
  o.epochs = 1;
  o.input.max_corrupt = 0.05;  // 1 of 54 is 1.9%
  EXPECT_EQ(train::run_training(o).steps, 54 / n() / 2);
  o.input.max_corrupt = 0.01;
  try {
    train::run_training(o);
    ADD_FAILURE() << "expected the corrupt-file limit to stop training";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("1 of the 54 training samples"), std::string::npos) << m;
    EXPECT_NE(m.find(cut), std::string::npos) << m;
    EXPECT_NE(m.find("--max-corrupt"), std::string::npos) << m;
  }
}

using testing::expect_training_error;

TEST_F(DataTest, BadDataSetsAreTheSameErrorOnEveryRank) {
  const std::string root = dataset("classes", "bad", 12);
  train::TrainOptions o = small(root + "/nowhere", "folder");
  o.steps = 1;
  expect_training_error(o, "nowhere' is not a folder");
  o = small(root, "voc");
  o.steps = 1;
  expect_training_error(o, "VOC split file");
  o = small(root, "folder");
  o.model = "deeplabv3plus_resnet18";
  o.steps = 1;
  expect_training_error(o, "holds class labels");
  o = small(root, "folder");
  o.input.format = "coco";
  o.steps = 1;
  expect_training_error(o, "accepted: folder, csv, voc, cityscapes");
  o = small(root, "folder");
  o.input.batch = 8;  // 10 training samples
  o.steps = 1;
  if (n() > 1) expect_training_error(o, "fewer than one global batch");
  // An empty class folder and a val split with other classes (after every rank's checks above).
  allreduce(torch::zeros({1}), "sync.before_zebra");
  if (r() == 0) fs::create_directories(root + "/val/zebra");
  allreduce(torch::zeros({1}), "sync.zebra");
  o = small(root, "folder");
  o.steps = 1;
  expect_training_error(o, "zebra");
}

}  // namespace
}  // namespace tessera
