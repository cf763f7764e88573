// The trainer under mpirun: data-parallel equivalence with one process on the whole batch,
// bitwise resume, the overlap of gradient allreduces with backward in the timeline, and bad
// input (unknown model, batch 0, missing or truncated checkpoints, weights that do not fit).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"
#include "models/registry.h"
#include "models/state_dict.h"
#include "mpi/torch_test_util.h"
#include "mpi/train_test_util.h"
#include "train/trainer.h"

namespace tessera {
namespace {

class TrainTest : public testing::TorchTest {
 protected:
  // A path every rank agrees on (rank 0's temp dir, which is the same machine in tests).
  static std::string path(const std::string& name) {
    return ::testing::TempDir() + "/tessera_train_np" + std::to_string(size()) + "_" + name;
  }
  static train::TrainOptions small() {
    train::TrainOptions o;
    o.model = "resnet18";
    o.image_size = 32;
    o.train_size = 64;
    o.val_size = 8;
    o.batch_size = 2;
    o.lr = 0.5;
    o.base_batch = 64;
    o.lr_schedule = "cosine";
    o.quiet = true;
    o.log_every = 5;
    return o;
  }
};

std::vector<torch::Tensor> snapshot(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

double max_relative_difference(const std::vector<torch::Tensor>& a,
                               const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max(1e-8, a[i].abs().max().item<double>());
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / scale);
  }
  return worst;
}

TEST_F(TrainTest, RanksWithBatchBMatchOneProcessWithBatchNB) {
  if (size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  // With SyncBatchNorm, N ranks with batch b see the statistics of the N*b batch, and the
  // averaged gradient is that of the mean loss over it: the same step as one process.
  const int steps = 4;
  train::TrainOptions o = small();
  o.steps = steps;
  o.sync_bn = true;
  o.weight_decay = 1e-4;
  // In f64: the comparison is of the arithmetic, not of rounding. In f32, ResNet-18's
  // BatchNorm layers with a few values per channel amplify the last-bit differences between
  // SyncBatchNorm's sums and BatchNorm's own (1e-6 after one step, 1e-2 after two at this
  // rate); in f64 the same runs agree to 1e-14 (docs/training.md).
  o.precision = "f64";
  std::vector<std::vector<torch::Tensor>> dist(steps + 1), ref(steps + 1);
  o.on_step = [&](int64_t done, torch::nn::Module& m) { dist[done] = snapshot(m); };
  train::run_training(o);
  if (rank() == 0) {
    train::TrainOptions r = o;
    r.local_only = true;
    r.sync_bn = false;
    r.batch_size = o.batch_size * size();
    r.on_step = [&](int64_t done, torch::nn::Module& m) { ref[done] = snapshot(m); };
    train::run_training(r);
    for (int s = 1; s <= steps; ++s) {
      const double d = max_relative_difference(dist[s], ref[s]);
      EXPECT_LT(d, 1e-5) << "step " << s;
      std::printf("[ equivalence ] %d ranks, step %d: max relative difference %.3g\n", size(), s,
                  d);
    }
  }
  // The comparison can tell: with each rank's own BatchNorm statistics (no SyncBatchNorm) the
  // same run leaves the single-process one far behind.
  train::TrainOptions local_bn = o;
  local_bn.sync_bn = false;
  local_bn.steps = 1;
  std::vector<torch::Tensor> plain;
  local_bn.on_step = [&](int64_t, torch::nn::Module& m) { plain = snapshot(m); };
  train::run_training(local_bn);
  if (rank() == 0) {
    const double d = max_relative_difference(plain, ref[1]);
    std::printf("[ equivalence ] without SyncBatchNorm, step 1: %.3g\n", d);
    EXPECT_GT(d, 1e-4);
  }
}

TEST_F(TrainTest, ResumeContinuesBitForBit) {
  train::TrainOptions o = small();
  o.steps = 20;  // 64 samples / (ranks x 2) per epoch: the run crosses epoch boundaries
  o.checkpoint = path("straight.pt");
  std::vector<torch::Tensor> straight;
  o.on_step = [&](int64_t done, torch::nn::Module& m) {
    if (done == 20) straight = snapshot(m);
  };
  train::run_training(o);

  train::TrainOptions first = o;
  first.stop_at = 10;
  first.checkpoint = path("half.pt");
  first.on_step = nullptr;
  train::run_training(first);
  train::TrainOptions second = o;
  second.resume = path("half.pt");
  second.checkpoint = path("resumed.pt");
  std::vector<torch::Tensor> resumed;
  second.on_step = [&](int64_t done, torch::nn::Module& m) {
    if (done == 20) resumed = snapshot(m);
  };
  train::TrainResult r = train::run_training(second);
  EXPECT_EQ(r.steps, 20);
  ASSERT_EQ(straight.size(), resumed.size());
  for (size_t i = 0; i < straight.size(); ++i) {
    EXPECT_TRUE(torch::equal(straight[i], resumed[i])) << "parameter " << i;
  }
}

TEST_F(TrainTest, TimelineShowsAllreduceBeforeBackwardEnds) {
  train::TrainOptions o = small();
  o.model = "resnet50";
  o.image_size = 64;
  o.steps = 2;
  o.timeline = path("timeline.json");
  train::run_training(o);
  if (rank() != 0 || size() < 2) return;
  std::ifstream f(o.timeline);
  nlohmann::json trace = nlohmann::json::parse(f);
  // Rows: "train" holds FORWARD / BACKWARD; each gradient "grad.*" its collectives.
  std::map<int, std::string> rows;
  for (const auto& e : trace) {
    if (e.value("ph", "") == "M") rows[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
  }
  double backward_end = -1, first_collective = -1;
  for (const auto& e : trace) {
    if (e.value("ph", "") != "X") continue;
    const std::string row = rows[e["tid"].get<int>()], name = e["name"];
    const double ts = e["ts"], dur = e["dur"];
    // The last step's backward: both spans are of step 2.
    if (row == "train" && name == "BACKWARD") backward_end = ts + dur;
  }
  double backward_start = -1;
  for (const auto& e : trace) {
    if (e.value("ph", "") == "X" && rows[e["tid"].get<int>()] == "train" &&
        e["name"] == "BACKWARD") {
      const double ts = e["ts"], dur = e["dur"];
      if (ts + dur == backward_end) backward_start = ts;
    }
  }
  for (const auto& e : trace) {
    if (e.value("ph", "") != "X") continue;
    const std::string row = rows[e["tid"].get<int>()], name = e["name"];
    const double ts = e["ts"];
    const bool collective = row.rfind("grad.", 0) == 0 && name != "NEGOTIATE" && name != "QUEUE" &&
                            name.find("MEMCPY") == std::string::npos;
    if (collective && ts >= backward_start && (first_collective < 0 || ts < first_collective)) {
      first_collective = ts;
    }
  }
  ASSERT_GT(backward_end, 0);
  ASSERT_GT(first_collective, 0);
  std::printf("[ overlap ] backward %.1f-%.1f ms, first gradient collective at %.1f ms\n",
              backward_start / 1e3, backward_end / 1e3, first_collective / 1e3);
  EXPECT_LT(first_collective, backward_end);
}

using testing::expect_training_error;

TEST_F(TrainTest, BadInputIsAClearErrorOnEveryRank) {
  train::TrainOptions o = small();
  o.steps = 2;
  o.model = "alexnet";
  expect_training_error(o, "unknown model 'alexnet'");
  o = small();
  o.steps = 2;
  o.batch_size = 0;
  expect_training_error(o, "--batch-size must be > 0");
  o = small();
  o.steps = 2;
  o.resume = path("no_such_checkpoint.pt");
  expect_training_error(o, "no_such_checkpoint.pt");
  // A truncated checkpoint: the error names it; a good one written beside it is untouched.
  o = small();
  o.steps = 2;
  o.checkpoint = path("good.pt");
  train::run_training(o);
  if (rank() == 0) {
    std::vector<char> bytes = read_file(path("good.pt"));
    write_file_atomically(path("cut.pt"), bytes.data(), bytes.size() / 2);
  }
  allreduce(torch::zeros({1}), "sync.cut");  // rank 0 wrote it
  train::TrainOptions bad = small();
  bad.steps = 4;
  bad.resume = path("cut.pt");
  bad.checkpoint = path("good.pt");
  expect_training_error(bad, "cut.pt' is truncated");
  train::TrainOptions ok = small();
  ok.steps = 4;
  ok.resume = path("good.pt");
  EXPECT_EQ(train::run_training(ok).steps, 4);
  // --init-from weights of another number of classes: the error names the file and shapes.
  if (rank() == 0) {
    torch::manual_seed(0);
    models::ModelSpec spec;
    spec.name = "resnet18";
    spec.num_classes = 10;
    models::write_state_dict(models::state_dict(models::make_model(spec).module()), path("ten.pt"));
  }
  allreduce(torch::zeros({1}), "sync.ten");
  o = small();
  o.steps = 2;
  o.init_from = path("ten.pt");
  expect_training_error(o, "ten.pt: 'fc.weight' has shape [10, 512]");
}

// Ranks started with different options (an MPMD command line, a stale script on one node) fail
// before the first step, on every rank, naming the option and both groups of ranks.
TEST_F(TrainTest, RanksWithDifferentOptionsFailNamingTheOptionAndTheRanks) {
  if (size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int last = size() - 1;
  std::string lows;
  for (int q = 0; q < last; ++q) lows += (q ? ", " : "") + std::to_string(q);
  const std::string low_ranks = (last > 1 ? "ranks " : "rank ") + lows;
  train::TrainOptions o = small();
  o.steps = 2;
  if (rank() == last) o.batch_size = 4;
  expect_training_error(o, "the ranks disagree on the training options: '--batch-size' is " +
                               std::to_string(small().batch_size) + " on " + low_ranks +
                               " but 4 on rank " + std::to_string(last));
  o = small();
  o.steps = 2;
  if (rank() == last) o.model = "resnet50";
  expect_training_error(
      o, "'--model' is resnet18 on " + low_ranks + " but resnet50 on rank " + std::to_string(last));
  // Per-rank resources may differ.
  o = small();
  o.steps = 2;
  if (rank() == last) o.workers = 1;
  EXPECT_EQ(train::run_training(o).steps, 2);
}

}  // namespace
}  // namespace tessera
