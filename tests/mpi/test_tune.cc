// The autotuner driving a real engine under mpirun: every rank switches at the same steps to the
// same settings, results stay exact through every switch, the log holds every trial and the
// config file holds the best one in a form the knob parser accepts.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "common/error.h"
#include "engine/engine.h"
#include "mpi/mpi_test_util.h"
#include "tune/config_file.h"
#include "tune/step_tuner.h"

namespace tessera {
namespace tune {
namespace {

using testing::WorldTest;
using TuneTest = WorldTest;

// The same value on every rank?
bool agreed(comm::Communicator& c, double v) {
  double lo = v, hi = v;
  comm::AllreduceOptions mn, mx;
  mn.op = ReduceOp::kMin;
  mx.op = ReduceOp::kMax;
  comm::allreduce(c, &lo, &lo, 1, DataType::kFloat64, mn);
  comm::allreduce(c, &hi, &hi, 1, DataType::kFloat64, mx);
  return lo == hi;
}

TEST_F(TuneTest, EveryRankSwitchesTogetherAndTheBestIsWrittenDown) {
  const int n = world_->size(), r = world_->rank();
  engine::EngineOptions eo = engine::options_for(world_->settings());
  eo.tunables.cycle_time_ms = 1;
  engine::Engine engine(*world_, eo);
  const std::string dir = ::testing::TempDir();
  const SettingValues values = {{kAutotune.name, "1"},
                                {kAutotuneWarmupSteps.name, "1"},
                                {kAutotuneStepsPerSample.name, "1"},
                                {kAutotuneSamples.name, "2"},
                                {kAutotuneBayesTrials.name, "3"},
                                {kAutotuneBounds.name, "algorithm=auto,ring,rhd,multicolor"},
                                {kAutotuneLog.name, dir + "tessera_tune_test.jsonl"},
                                {kAutotuneConfig.name, dir + "tessera_tune_test.json"}};
  StepTuner tuner(engine, *world_, values);
  const int kTensors = 12;
  std::vector<std::vector<float>> in(kTensors), out(kTensors);
  for (int t = 0; t < kTensors; ++t) {
    in[t].assign(static_cast<size_t>(1 + t * 2000), static_cast<float>(r + t));
  }
  int steps = 0;
  std::vector<engine::Tunables> seen;
  for (; steps < 200 && !tuner.done(); ++steps) {
    std::vector<engine::Handle> h(kTensors);
    for (int t = 0; t < kTensors; ++t) {
      out[t].assign(in[t].size(), -1);
      h[t] = engine.enqueue_allreduce("g" + std::to_string(t), in[t].data(), out[t].data(),
                                      DataType::kFloat32, {static_cast<int64_t>(in[t].size())},
                                      ReduceOp::kSum);
    }
    for (int t = 0; t < kTensors; ++t) {
      h[t].wait(60);
      const float want = static_cast<float>(n * (n - 1) / 2 + n * t);
      for (float v : out[t]) ASSERT_EQ(v, want) << "tensor " << t << " step " << steps;
    }
    tuner.after_step();
    const engine::Tunables now = engine.tunables();
    if (seen.empty() || seen.back() != now) seen.push_back(now);
    // Every rank holds the same settings after every step.
    ASSERT_TRUE(agreed(*world_, static_cast<double>(now.fusion_threshold))) << "step " << steps;
    ASSERT_TRUE(agreed(*world_, now.cycle_time_ms)) << "step " << steps;
    ASSERT_TRUE(agreed(*world_, now.cache_enabled)) << "step " << steps;
    ASSERT_TRUE(
        agreed(*world_, static_cast<double>(std::hash<std::string>{}(now.allreduce) >> 12)));
  }
  ASSERT_TRUE(tuner.done()) << "not done after " << steps << " steps";
  // 4 algorithms x cache on/off = 8 discrete trials, 3 Bayesian ones, then 3 finalists and the
  // start unless it is one of them: 1 + trials x 3 steps.
  const size_t trials = tuner.tuner().trials().size();
  EXPECT_TRUE(trials == 14u || trials == 15u) << trials;
  EXPECT_EQ(steps, 1 + static_cast<int>(trials) * 3);
  EXPECT_GE(seen.size(), 8u);  // it really switched
  const Tunables best = tuner.tuner().best().config;
  EXPECT_EQ(engine.tunables(), best);
  if (r == 0) {
    std::ifstream log(values.at(kAutotuneLog.name));
    std::string line;
    int lines = 0;
    bool done_line = false;
    while (std::getline(log, line)) {
      const nlohmann::json j = nlohmann::json::parse(line);
      ++lines;
      if (j.contains("done")) done_line = true;
      if (!j.contains("done")) {
        EXPECT_EQ(j.at("samples_bytes_per_s").size(), 2u);
      }
    }
    EXPECT_EQ(lines, static_cast<int>(trials) + 1);
    EXPECT_TRUE(done_line);
    // The config file's settings parse, and give back the best configuration exactly.
    const SettingValues written = read_config(values.at(kAutotuneConfig.name));
    EXPECT_EQ(written.size(), 6u);
    EXPECT_EQ(engine::options_from(written).tunables, best);
  }
}

TEST_F(TuneTest, BadBoundsFailOnEveryRankNamingTheField) {
  engine::Engine engine(*world_);
  try {
    StepTuner t(engine, *world_, {{kAutotuneBounds.name, "cycle_time_ms=3-1"}});
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'cycle_time_ms'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tune
}  // namespace tessera
