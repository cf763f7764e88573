// Pure parts of the trainer: schedules, metrics, the sampler, the synthetic data, checkpoints,
// the optimizer's group plan, the memory policy's names.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "common/atomic_file.h"
#include "common/error.h"
#include "data/sampler.h"
#include "data/synthetic_shapes.h"
#include "models/registry.h"
#include "runtime/memory_policy.h"
#include "tessera/torch.h"
#include "train/checkpoint.h"
#include "train/input/input_options.h"
#include "train/metrics.h"
#include "train/pictures.h"
#include "train/schedule.h"

namespace tessera {
namespace {

TEST(Schedule, LinearScalingAndWarmup) {
  train::LrSchedule s;
  s.base_lr = 0.1;
  s.base_batch = 256;
  s.global_batch = 1024;
  s.warmup_steps = 10;
  s.total_steps = 110;
  EXPECT_DOUBLE_EQ(s.peak(), 0.4);
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);         // the unscaled rate
  EXPECT_DOUBLE_EQ(s.at(5), 0.1 + 0.15);  // halfway
  EXPECT_DOUBLE_EQ(s.at(10), 0.4);
  EXPECT_DOUBLE_EQ(s.at(109), 0.4);
}

TEST(Schedule, StepCosinePoly) {
  train::LrSchedule s;
  s.base_lr = 1.0;
  s.base_batch = s.global_batch = 8;
  s.total_steps = 100;
  s.kind = train::ScheduleKind::kStep;
  s.milestones = {30, 60};
  EXPECT_DOUBLE_EQ(s.at(29), 1.0);
  EXPECT_DOUBLE_EQ(s.at(30), 0.1);
  EXPECT_NEAR(s.at(99), 0.01, 1e-15);
  s.kind = train::ScheduleKind::kCosine;
  EXPECT_DOUBLE_EQ(s.at(0), 1.0);
  EXPECT_NEAR(s.at(50), 0.5, 1e-12);
  EXPECT_NEAR(s.at(100), 0.0, 1e-12);
  s.kind = train::ScheduleKind::kPoly;
  EXPECT_NEAR(s.at(50), std::pow(0.5, 0.9), 1e-12);
  EXPECT_THROW(train::parse_schedule("linear"), InvalidArgument);
}

// The options in epochs become steps of the run: warm-up and milestones rounded to the nearest
// step, the kind parsed, the peak scaled by the run's global batch.
TEST(Schedule, PlannedFromTheUsersOptions) {
  train::ScheduleOptions o;
  o.lr = 0.2;
  o.base_batch = 64;
  o.warmup_epochs = 0.25;
  o.kind = "step";
  o.milestones = {1.5, 2.0};
  o.gamma = 0.5;
  const train::LrSchedule s = train::plan_schedule(o, 128, 10, 40);
  EXPECT_DOUBLE_EQ(s.peak(), 0.4);
  EXPECT_EQ(s.warmup_steps, 3);  // 2.5 rounds away from zero
  EXPECT_EQ(s.milestones, (std::vector<int64_t>{15, 20}));
  EXPECT_EQ(s.kind, train::ScheduleKind::kStep);
  EXPECT_EQ(s.total_steps, 40);
  EXPECT_DOUBLE_EQ(s.at(19), 0.2);
  EXPECT_DOUBLE_EQ(s.at(20), 0.1);
  EXPECT_EQ(train::describe(o),
            "--lr: 0.20000000000000001\n--lr-base-batch: 64\n--warmup-epochs: 0.25\n"
            "--lr-schedule: step\n--lr-milestones: 1.5 2\n--lr-gamma: 0.5\n");
  for (auto bad : {&train::ScheduleOptions::lr, &train::ScheduleOptions::warmup_epochs}) {
    train::ScheduleOptions b;
    b.*bad = -1;
    EXPECT_THROW(train::validate(b), InvalidArgument);
  }
  train::ScheduleOptions unknown;
  unknown.kind = "linear";
  EXPECT_THROW(train::validate(unknown), InvalidArgument);
}

// Each out-of-range input option is refused naming its flag; the shared options are described
// (workers and prefetch, per-rank resources, are not).
TEST(InputOptions, ValidatedAndDescribed) {
  train::InputOptions o;
  EXPECT_NO_THROW(train::validate(o));
  const std::vector<std::pair<std::function<void(train::InputOptions&)>, std::string>> bad = {
      {[](train::InputOptions& b) { b.batch = 0; }, "--batch-size"},
      {[](train::InputOptions& b) { b.image_size = 15; }, "--image-size"},
      {[](train::InputOptions& b) { b.workers = 0; }, "--workers"},
      {[](train::InputOptions& b) { b.prefetch = 0; }, "--prefetch"},
      {[](train::InputOptions& b) { b.max_corrupt = 1; }, "--max-corrupt"},
      {[](train::InputOptions& b) { b.min_scale = 0; }, "--scale-range"},
      {[](train::InputOptions& b) { b.min_scale = 2.5; }, "--scale-range"}};
  for (const auto& [spoil, flag] : bad) {
    train::InputOptions b;
    spoil(b);
    try {
      train::validate(b);
      ADD_FAILURE() << flag << " was not refused";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  }
  o.min_scale = o.max_scale = 1;
  const std::string d = train::describe(o);
  EXPECT_NE(d.find("--scale-range: 1 1\n"), std::string::npos) << d;
  EXPECT_NE(d.find("--batch-size: 8\n"), std::string::npos) << d;
  EXPECT_EQ(d.find("--workers"), std::string::npos) << d;
}

// The grid's geometry, each picture's pixels in closed form: an image stretched over its own
// range, masks in the VOC colours (1 is (128, 0, 0), 2 is (0, 128, 0)), 255 white, white gaps.
TEST(Pictures, PredictionGridPlacesEachPictureInItsCell) {
  const int64_t n = 2, s = 4, zoom = 2;
  torch::Tensor images = torch::linspace(-1, 3, n * 3 * s * s).reshape({n, 3, s, s});
  torch::Tensor truth = torch::ones({n, s, s}, torch::kLong);
  truth[1][0][0] = 255;
  torch::Tensor pred = torch::full({n, s, s}, 2, torch::kLong);
  const torch::Tensor g = train::prediction_grid(images, truth, pred, zoom);
  const int64_t cell = s * zoom, gap = 2;
  ASSERT_EQ(g.sizes(), (std::vector<int64_t>{n * (cell + gap) - gap, 3 * (cell + gap) - gap, 3}));
  ASSERT_EQ(g.scalar_type(), torch::kUInt8);
  const auto px = [&](int64_t y, int64_t x) {
    const torch::Tensor p = g[y][x];
    return std::vector<int>{p[0].item<int>(), p[1].item<int>(), p[2].item<int>()};
  };
  // Sample 0's image: its first channel's first pixel is its minimum, the last channel's last
  // pixel its maximum.
  EXPECT_EQ(px(0, 0)[0], 0);
  EXPECT_EQ(px(cell - 1, cell - 1)[2], 255);
  EXPECT_EQ(px(1, 1), px(0, 0)) << "zoom repeats each pixel";
  EXPECT_EQ(px(0, cell), (std::vector<int>{255, 255, 255})) << "the gap";
  EXPECT_EQ(px(3, cell + gap + 3), (std::vector<int>{128, 0, 0}));
  EXPECT_EQ(px(3, 2 * (cell + gap) + 3), (std::vector<int>{0, 128, 0}));
  EXPECT_EQ(px(cell + gap, cell + gap), (std::vector<int>{255, 255, 255})) << "ignored pixel";
  EXPECT_THROW(train::prediction_grid(images, truth, pred.narrow(0, 0, 1)), InvalidArgument);
  // The curve: two panels, the metric on 0..1 whatever its values.
  const std::string svg = train::training_curve_svg({{50, 1.5}, {100, 0.5}}, {{100, 0.7}}, "miou");
  EXPECT_NE(svg.find("height=\"880\""), std::string::npos);
  EXPECT_NE(svg.find("validation miou"), std::string::npos);
}

TEST(Metrics, ConfusionAccuracyMeanIou) {
  torch::Tensor c = torch::zeros({3, 3}, torch::kLong);
  // targets 0 0 1 1 2 255; predictions 0 1 1 1 0 2 (the 255 is ignored)
  train::accumulate_confusion(c, torch::tensor({0, 1, 1, 1, 0, 2}),
                              torch::tensor({0, 0, 1, 1, 2, 255}));
  EXPECT_EQ(c.sum().item<int64_t>(), 5);
  EXPECT_DOUBLE_EQ(train::accuracy(c), 3.0 / 5.0);
  // IoU: class 0: 1 / (1 + 1 + 1) ; class 1: 2 / (2 + 1) ; class 2: 0 / 1
  EXPECT_NEAR(train::mean_iou(c), (1.0 / 3 + 2.0 / 3 + 0.0) / 3, 1e-12);
  EXPECT_THROW(train::accumulate_confusion(c, torch::tensor({0}), torch::tensor({5})),
               InvalidArgument);
}

// AUC against its definition, counted pair by pair, over every labelling of small score lists
// with ties (scores drawn from few values).
TEST(Metrics, RocAucIsThePairwiseProbability) {
  std::mt19937_64 rng(4);
  for (int n = 2; n <= 9; ++n) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<double> scores(static_cast<size_t>(n));
      for (double& v : scores) v = static_cast<double>(rng() % 4);
      for (int mask = 1; mask < (1 << n) - 1; ++mask) {
        std::vector<int64_t> labels(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = (mask >> i) & 1;
        double wins = 0, pairs = 0;
        for (int i = 0; i < n; ++i) {
          for (int j = 0; j < n; ++j) {
            if (labels[static_cast<size_t>(i)] != 1 || labels[static_cast<size_t>(j)] != 0)
              continue;
            pairs += 1;
            const double a = scores[static_cast<size_t>(i)], b = scores[static_cast<size_t>(j)];
            wins += a > b ? 1.0 : a == b ? 0.5 : 0.0;
          }
        }
        ASSERT_NEAR(train::roc_auc(scores, labels), wins / pairs, 1e-12);
      }
    }
  }
  EXPECT_DOUBLE_EQ(train::roc_auc({0.1, 0.9, 0.2, 0.8}, {0, 1, 0, 1}), 1.0);
  EXPECT_DOUBLE_EQ(train::roc_auc({0.9, 0.1}, {0, 1}), 0.0);
  EXPECT_THROW(train::roc_auc({0.1, 0.2}, {1, 1}), InvalidArgument);  // one class only
  EXPECT_THROW(train::roc_auc({0.1, 0.2}, {0, 2}), InvalidArgument);  // not a binary label
  EXPECT_THROW(train::roc_auc({0.1}, {0, 1}), InvalidArgument);
}

TEST(Sampler, RanksTogetherSeeWhatOneRankSees) {
  for (int ranks : {1, 2, 3, 4}) {
    data::ShardPlan many;
    many.dataset_size = 100;
    many.seed = 7;
    many.ranks = ranks;
    many.batch = 4;
    data::ShardPlan one = many;
    one.ranks = 1;
    one.batch = 4 * ranks;
    EXPECT_EQ(many.steps_per_epoch(), 100 / (4 * ranks));
    for (int64_t step = 0; step < 3 * many.steps_per_epoch(); ++step) {
      std::vector<int64_t> joined;
      for (int r = 0; r < ranks; ++r) {
        auto part = data::batch_indices(many, step, r);
        joined.insert(joined.end(), part.begin(), part.end());
      }
      EXPECT_EQ(joined, data::batch_indices(one, step, 0)) << ranks << " " << step;
      const auto order =
          data::epoch_order(many.dataset_size, many.seed, step / many.steps_per_epoch());
      EXPECT_EQ(data::batch_indices(many, order, step, ranks - 1),
                data::batch_indices(many, step, ranks - 1));
    }
  }
  // Each epoch is a permutation, and epochs differ.
  auto e0 = data::epoch_order(50, 1, 0), e1 = data::epoch_order(50, 1, 1);
  EXPECT_EQ(std::set<int64_t>(e0.begin(), e0.end()).size(), 50u);
  EXPECT_NE(e0, e1);
  data::ShardPlan tiny;
  tiny.dataset_size = 3;
  tiny.ranks = 2;
  tiny.batch = 2;
  EXPECT_THROW(tiny.steps_per_epoch(), InvalidArgument);
}

TEST(Sampler, ShardOrderIsAPermutationPerRankAndEpoch) {
  const auto a = data::shard_epoch_order(40, 3, 0, 0);
  EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), 40u);
  EXPECT_EQ(*std::max_element(a.begin(), a.end()), 39);
  EXPECT_EQ(a, data::shard_epoch_order(40, 3, 0, 0));  // deterministic
  EXPECT_NE(a, data::shard_epoch_order(40, 3, 0, 1));  // another epoch
  EXPECT_NE(a, data::shard_epoch_order(40, 3, 1, 0));  // another rank
  EXPECT_NE(a, data::shard_epoch_order(40, 4, 0, 0));  // another seed
  EXPECT_THROW(data::shard_epoch_order(40, 3, -1, 0), InvalidArgument);
}

TEST(SyntheticShapes, DeterministicAndConsistent) {
  data::SyntheticShapes a(64, 32, 5), b(64, 32, 5), c(64, 32, 6);
  data::Batch x = a.get({3, 17, 3}), y = b.get({3, 17, 3}), z = c.get({3});
  EXPECT_TRUE(torch::equal(x.images, y.images));
  EXPECT_TRUE(torch::equal(x.images[0], x.images[2]));
  EXPECT_FALSE(torch::equal(x.images[0], z.images[0]));
  std::set<int64_t> labels;
  data::Batch all = a.get([] {
    std::vector<int64_t> v(64);
    for (int i = 0; i < 64; ++i) v[static_cast<size_t>(i)] = i;
    return v;
  }());
  for (int64_t i = 0; i < 64; ++i) {
    const int64_t label = all.labels[i].item<int64_t>();
    labels.insert(label);
    // The labelled (largest) shape is visible in the mask.
    EXPECT_GT((all.masks[i] == label + 1).sum().item<int64_t>(), 0) << i;
  }
  EXPECT_EQ(labels.size(), 3u);
  EXPECT_GE(all.masks.min().item<int64_t>(), 0);
  EXPECT_LE(all.masks.max().item<int64_t>(), 3);
  EXPECT_THROW(a.get({64}), InvalidArgument);
  EXPECT_THROW(data::SyntheticShapes(10, 8, 0), InvalidArgument);
}

TEST(Checkpoint, RoundTripRestoresModelOptimizerAndRng) {
  models::ModelSpec spec;
  spec.name = "resnet18";
  spec.num_classes = 3;
  models::Model m = models::make_model(spec);
  torch::optim::SGD sgd(m.module().parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  m.forward(torch::randn({2, 3, 32, 32})).sum().backward();
  sgd.step();  // momentum buffers exist
  train::CheckpointMeta meta;
  meta.model = "resnet18";
  meta.num_classes = 3;
  meta.step = 17;
  const std::string bytes = train::encode_checkpoint(m.module(), sgd, meta);
  const torch::Tensor next = torch::randn({4});  // what the RNG gives after the checkpoint
  {
    // The same state gives the same bytes, whatever the tensors' addresses: a copy of the
    // model and optimizer (new TensorImpls) encodes identically.
    models::Model copy = models::make_model(spec);
    torch::optim::SGD sgd_copy(copy.module().parameters(),
                               torch::optim::SGDOptions(0.1).momentum(0.9));
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    torch::Tensor rng_now;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      rng_now = gen.get_state();
    }
    train::restore_checkpoint(bytes, "mem", meta, copy.module(), sgd_copy);
    EXPECT_TRUE(train::encode_checkpoint(copy.module(), sgd_copy, meta) == bytes);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng_now);
  }

  torch::manual_seed(999);
  models::Model m2 = models::make_model(spec);
  torch::optim::SGD sgd2(m2.module().parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  train::CheckpointMeta got = train::restore_checkpoint(bytes, "mem", meta, m2.module(), sgd2);
  EXPECT_EQ(got.step, 17);
  EXPECT_TRUE(torch::equal(torch::randn({4}), next));
  auto p1 = m.module().parameters(), p2 = m2.module().parameters();
  for (size_t i = 0; i < p1.size(); ++i) EXPECT_TRUE(torch::equal(p1[i], p2[i]));
  // Same next step from both: the momentum buffers came along.
  sgd.zero_grad();
  sgd2.zero_grad();
  m.forward(torch::ones({2, 3, 32, 32})).sum().backward();
  m2.forward(torch::ones({2, 3, 32, 32})).sum().backward();
  sgd.step();
  sgd2.step();
  for (size_t i = 0; i < p1.size(); ++i) EXPECT_TRUE(torch::equal(p1[i], p2[i]));

  // Truncated, foreign and mismatched checkpoints are errors that name the file.
  try {
    train::restore_checkpoint(bytes.substr(0, bytes.size() / 2), "half.pt", meta, m2.module(),
                              sgd2);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'half.pt' is truncated"), std::string::npos) << e.what();
  }
  train::CheckpointMeta other = meta;
  other.model = "resnet50";
  EXPECT_THROW(train::restore_checkpoint(bytes, "x.pt", other, m2.module(), sgd2), InvalidArgument);
  // One flipped bit anywhere in the archive is caught by the envelope's checksum before
  // libtorch reads it (libtorch's reader can crash on damaged archives); so is a bare archive.
  for (size_t at : {size_t{40}, bytes.size() / 3, bytes.size() - 1}) {
    std::string damaged = bytes;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x10);
    try {
      train::restore_checkpoint(damaged, "flip.pt", meta, m2.module(), sgd2);
      FAIL() << "a flipped bit at " << at << " loaded";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("checksum does not match"), std::string::npos)
          << e.what();
    }
  }
  try {
    train::restore_checkpoint(bytes.substr(32), "old.pt", meta, m2.module(), sgd2);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("written by an older tessera"), std::string::npos)
        << e.what();
  }
}

// A process killed (SIGKILL) at random moments while it writes checkpoints over and over: the
// file at the path is always a whole checkpoint, the last one written or the one before.
TEST(Checkpoint, AKillDuringAWriteLeavesThePreviousCheckpointLoadable) {
  const std::string dir = ::testing::TempDir() + "/tessera_kill_write";
  std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str());
  const std::string path = dir + "/ck.pt";
  models::ModelSpec spec;
  spec.name = "resnet18";
  spec.num_classes = 3;
  models::Model m = models::make_model(spec);
  torch::optim::SGD sgd(m.module().parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  train::CheckpointMeta meta;
  meta.model = "resnet18";
  meta.num_classes = 3;
  meta.step = 0;
  train::write_checkpoint(path, m.module(), sgd, meta);
  // How long the file part of one write takes here (encoding comes before it, without a
  // temporary file), so the kills can be aimed at it.
  meta.step = 1;
  const std::string one = train::encode_checkpoint(m.module(), sgd, meta);
  const auto t0 = std::chrono::steady_clock::now();
  write_file_atomically(path, one.data(), one.size());
  const double file_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::mt19937 rng(5);
  int mid_write = 0;
  int64_t last_step = 1;
  const int kTrials = 12;
  for (int t = 0; t < kTrials; ++t) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Steps last_step+1, +2, ...: each checkpoint says which write it was.
      for (int64_t step = last_step + 1;; ++step) {
        meta.step = step;
        train::write_checkpoint(path, m.module(), sgd, meta);
      }
    }
    // Wait for the child's temporary file to appear, then kill it at a random moment of the
    // file write or just after it (a kill after the rename must leave the new checkpoint).
    const std::string tmp = path + ".tmp." + std::to_string(child);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!std::ifstream(tmp).good() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::uniform_real_distribution<double> when(0.0, 1.5 * file_s);
    std::this_thread::sleep_for(std::chrono::duration<double>(when(rng)));
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    if (std::ifstream(tmp).good()) {
      ++mid_write;
      std::remove(tmp.c_str());
    }
    models::Model back = models::make_model(spec);
    torch::optim::SGD sgd_back(back.module().parameters(), torch::optim::SGDOptions(0.1));
    const std::vector<char> bytes = read_file(path);
    train::CheckpointMeta got;
    ASSERT_NO_THROW(got = train::restore_checkpoint(std::string(bytes.begin(), bytes.end()), path,
                                                    meta, back.module(), sgd_back))
        << "trial " << t;
    EXPECT_GE(got.step, last_step) << "a checkpoint went backwards";
    last_step = got.step;
  }
  // Most kills land inside the file write (the temporary file is left); one at least must.
  EXPECT_GE(mid_write, 1) << "no kill landed inside a write";
  std::printf("%d of %d kills landed inside a write; the checkpoint loaded after every one\n",
              mid_write, kTrials);
}

TEST(AtomicFile, ReplacesWholeOrNotAtAll) {
  const std::string dir = ::testing::TempDir() + "/tessera_atomic";
  std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str());
  const std::string path = dir + "/ckpt";
  write_file_atomically(path, "good", 4);
  // The target is a directory now: the rename fails, the temporary file is removed, and
  // nothing half-written is left.
  const std::string blocked = dir + "/blocked";
  std::system(("mkdir -p " + blocked + "/x").c_str());
  EXPECT_THROW(write_file_atomically(blocked, "new", 3), InvalidArgument);
  std::vector<char> back = read_file(path);
  EXPECT_EQ(std::string(back.begin(), back.end()), "good");
  EXPECT_EQ(std::system(("test -z \"$(ls " + dir + " | grep tmp)\"").c_str()), 0);
  EXPECT_THROW(read_file(dir + "/missing"), InvalidArgument);
}

TEST(DistributedOptimizer, GroupPlanCoversEveryParameterOnce) {
  for (size_t n = 0; n < 40; ++n) {
    for (int g = 0; g <= 9; ++g) {
      auto plan = DistributedOptimizer::plan_groups(n, g);
      if (g == 0 || n == 0) {
        EXPECT_TRUE(plan.empty());
        continue;
      }
      EXPECT_EQ(plan.size(), std::min<size_t>(n, static_cast<size_t>(g)));
      std::vector<size_t> flat;
      size_t lo = n, hi = 0;
      for (auto& members : plan) {
        lo = std::min(lo, members.size());
        hi = std::max(hi, members.size());
        flat.insert(flat.end(), members.begin(), members.end());
      }
      EXPECT_LE(hi - lo, 1u);
      // Reverse registration order: n-1, n-2, ..., 0.
      for (size_t k = 0; k < flat.size(); ++k) EXPECT_EQ(flat[k], n - 1 - k);
    }
  }
  EXPECT_THROW(DistributedOptimizer::plan_groups(3, -1), InvalidArgument);
}

TEST(Names, CompressionAndMallocPolicy) {
  EXPECT_EQ(parse_compression("fp16"), Compression::kFloat16);
  EXPECT_EQ(parse_compression("bf16"), Compression::kBFloat16);
  EXPECT_THROW(parse_compression("int8"), InvalidArgument);
  EXPECT_EQ(runtime::parse_malloc_policy("keep"), runtime::MallocPolicy::kKeep);
  EXPECT_THROW(runtime::parse_malloc_policy("fast"), InvalidArgument);
}

}  // namespace
}  // namespace tessera
