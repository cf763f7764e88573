// The autotuner's pure parts: the Gaussian process and expected improvement against closed
// forms, the search space and its bounds, the search schedule and what it finds on known score
// functions, and the config file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "common/error.h"
#include "tune/autotuner.h"
#include "tune/config_file.h"
#include "tune/gaussian_process.h"
#include "tune/search_space.h"

namespace tessera {
namespace tune {
namespace {

using comm::Algorithm;

TEST(GaussianProcess, InterpolatesItsPointsAndIsUnsureFarFromThem) {
  GaussianProcess gp(0.2, 1e-6);
  const std::vector<std::vector<double>> xs = {{0.1}, {0.4}, {0.9}};
  const std::vector<double> ys = {3.0, -1.0, 7.0};
  gp.fit(xs, ys);
  for (size_t i = 0; i < xs.size(); ++i) {
    const GpPrediction p = gp.predict(xs[i]);
    EXPECT_NEAR(p.mean, ys[i], 1e-3);
    EXPECT_LT(p.sd, 0.02);
  }
  // Far from every point the belief returns to the prior: the mean of ys, their spread.
  GaussianProcess wide(0.01, 1e-6);
  wide.fit(xs, ys);
  const GpPrediction far = wide.predict({0.65});
  EXPECT_NEAR(far.mean, 3.0, 1e-6);
  const double sd = std::sqrt(((0.0) + 16.0 + 16.0) / 3.0);
  EXPECT_NEAR(far.sd, sd, 1e-6);
}

TEST(GaussianProcess, MaternKernelClosedForm) {
  GaussianProcess gp(0.5, 0.0);
  EXPECT_DOUBLE_EQ(gp.kernel({0.3, 0.2}, {0.3, 0.2}), 1.0);
  // r = sqrt(5) * d / l with d = 0.5: (1 + r + r^2/3) exp(-r).
  const double r = std::sqrt(5.0) * 0.5 / 0.5;
  EXPECT_NEAR(gp.kernel({0.0, 0.0}, {0.3, 0.4}), (1 + r + r * r / 3) * std::exp(-r), 1e-12);
  EXPECT_THROW(gp.fit({{0.1}, {0.2, 0.3}}, {1, 2}), InvalidArgument);
  EXPECT_THROW(gp.fit({{0.1}}, {1, 2}), InvalidArgument);
}

TEST(ExpectedImprovement, ClosedForms) {
  // At the incumbent with sd 1: E[max(0, Z)] = 1/sqrt(2 pi).
  EXPECT_NEAR(expected_improvement(5.0, 1.0, 5.0), 1.0 / std::sqrt(2 * M_PI), 1e-12);
  // No uncertainty: the plain gain or nothing.
  EXPECT_DOUBLE_EQ(expected_improvement(7.0, 0.0, 5.0), 2.0);
  EXPECT_DOUBLE_EQ(expected_improvement(3.0, 0.0, 5.0), 0.0);
  // gain*Phi(z) + sd*phi(z) with gain 1, sd 2: z = 0.5.
  const double z = 0.5, phi = std::exp(-z * z / 2) / std::sqrt(2 * M_PI);
  const double Phi = 0.5 * std::erfc(-z / std::sqrt(2.0));
  EXPECT_NEAR(expected_improvement(6.0, 2.0, 5.0), 1.0 * Phi + 2.0 * phi, 1e-12);
  // The margin xi lowers it; more uncertainty at the same mean raises it.
  EXPECT_LT(expected_improvement(6.0, 2.0, 5.0, 0.5), expected_improvement(6.0, 2.0, 5.0));
  EXPECT_LT(expected_improvement(4.0, 1.0, 5.0), expected_improvement(4.0, 3.0, 5.0));
}

TEST(SearchSpace, DefaultBoundsHoldEveryKnobDefault) {
  const SearchSpace s = parse_bounds("");
  const Tunables c = engine::options_from({}).tunables;
  EXPECT_LE(s.fusion_threshold.lo, c.fusion_threshold);
  EXPECT_GE(s.fusion_threshold.hi, c.fusion_threshold);
  EXPECT_LE(s.cycle_time_ms.lo, c.cycle_time_ms);
  EXPECT_GE(s.cycle_time_ms.hi, c.cycle_time_ms);
  EXPECT_LE(s.segment_bytes.lo, c.segment_bytes);
  EXPECT_GE(s.segment_bytes.hi, c.segment_bytes);
  EXPECT_LE(s.colors.lo, c.colors);
  EXPECT_GE(s.colors.hi, c.colors);
  EXPECT_EQ(s.algorithms.size(), 7u);
  EXPECT_EQ(s.cache.size(), 2u);
  // The start is the settings' defaults, and the unit cube maps it back exactly.
  const std::vector<Dim> dims = continuous_dims(s, Fixed{}, Algorithm::kAuto);
  ASSERT_EQ(dims.size(), 4u);
  EXPECT_EQ(from_unit(s, dims, to_unit(s, dims, c), c), c);
}

TEST(SearchSpace, ParsesBounds) {
  const SearchSpace s = parse_bounds(
      "fusion_threshold=1M-64M; cycle_time_ms=0.5-3;segment_bytes=64K-1M;colors=2-4;"
      "algorithm=ring,dbtree;cache=on");
  EXPECT_EQ(s.fusion_threshold.lo, 1 << 20);
  EXPECT_EQ(s.fusion_threshold.hi, 64 << 20);
  EXPECT_EQ(s.cycle_time_ms.lo, 0.5);
  EXPECT_EQ(s.cycle_time_ms.hi, 3);
  EXPECT_EQ(s.segment_bytes.hi, 1 << 20);
  EXPECT_EQ(s.colors.hi, 4);
  EXPECT_EQ(s.algorithms, (std::vector<Algorithm>{Algorithm::kRing, Algorithm::kDbtree}));
  EXPECT_EQ(s.cache, std::vector<bool>{true});
}

TEST(SearchSpace, BoundsThatExcludeEveryValueNameTheField) {
  auto what = [](const std::string& text) {
    try {
      parse_bounds(text);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::map<std::string, std::string> cases = {
      {"fusion_threshold=64M-1M", "'fusion_threshold'"},
      {"cycle_time_ms=5-1", "'cycle_time_ms'"},
      {"cycle_time_ms=-1-3", "'cycle_time_ms'"},
      {"colors=2.2-2.8", "'colors'"},
      {"colors=0-40", "'colors'"},
      {"segment_bytes=1-2", "'segment_bytes'"},
      {"algorithm=", "'algorithm'"},
      {"algorithm=ring,fastest", "'algorithm'"},
      {"cache=", "'cache'"},
      {"cache=maybe", "'cache'"},
      {"fusion=1M-2M", "'fusion'"},
      {"fusion_threshold", "'fusion_threshold'"},
  };
  for (const auto& c : cases) {
    const std::string w = what(c.first);
    EXPECT_NE(w.find(c.second), std::string::npos) << c.first << ": " << w;
    EXPECT_NE(w.find("accepted:"), std::string::npos) << c.first << ": " << w;
  }
  // The Autotuner refuses an empty algorithm list left after filtering for the communicator.
  SearchSpace s;
  s.algorithms.clear();
  EXPECT_THROW(Autotuner(s, Fixed{}, Tunables{}, TunerOptions{}), InvalidArgument);
}

TEST(SearchSpace, GivenSettingsAreFixedAndKeepTheirValues) {
  const SettingValues given = {{"TESSERA_FUSION_THRESHOLD", "8M"},
                               {"TESSERA_ALLREDUCE", "ring:0-1K;rhd:1025-max"}};
  const Fixed f = Fixed::from(given);
  EXPECT_TRUE(f.fusion_threshold);
  EXPECT_TRUE(f.algorithm);
  EXPECT_FALSE(f.cycle_time || f.cache || f.segment_bytes || f.colors);
  // The tuner starts from the engine's tunables, so a fixed setting holds the given value and
  // the range text stays as written: one algorithm cannot describe it.
  const Tunables start = engine::options_from(given).tunables;
  EXPECT_EQ(start.fusion_threshold, size_t{8} << 20);
  EXPECT_EQ(start.allreduce, "ring:0-1K;rhd:1025-max");
  EXPECT_EQ(algorithm_of(start), Algorithm::kAuto);
  for (const auto& kv : setting_values(start, f)) {
    EXPECT_NE(kv.first, "TESSERA_FUSION_THRESHOLD");
    EXPECT_NE(kv.first, "TESSERA_ALLREDUCE");
  }
  EXPECT_EQ(continuous_dims(SearchSpace{}, f, Algorithm::kRhd),
            (std::vector<Dim>{Dim::kCycleTime}));
}

TEST(SearchSpace, OneAlgorithmReadsAndWritesAsText) {
  EXPECT_EQ(algorithm_of(Tunables{}), Algorithm::kAuto);
  for (Algorithm a : comm::all_algorithms()) {
    const Tunables t = with_algorithm(Tunables{}, a);
    EXPECT_EQ(algorithm_of(t), a) << t.allreduce;
  }
  EXPECT_EQ(with_algorithm(Tunables{}, Algorithm::kAuto).allreduce, "");
  Tunables t;
  t.allreduce = "dbtree";
  EXPECT_EQ(algorithm_of(t), Algorithm::kDbtree);
}

// The config file's values give back the configuration exactly.
TEST(SearchSpace, SettingValuesRoundTrip) {
  Tunables t = with_algorithm(Tunables{}, Algorithm::kMulticolor);
  t.cache_enabled = false;
  t.fusion_threshold = 12345 * 1024;
  t.cycle_time_ms = 0.37;
  t.segment_bytes = 64 << 10;
  t.colors = 5;
  SettingValues values;
  for (const auto& kv : setting_values(t, Fixed{})) values[kv.first] = kv.second;
  EXPECT_EQ(values.size(), 6u);
  EXPECT_EQ(engine::options_from(values).tunables, t);
  // A tuned cycle time is any double: its text must give back every bit (the autotuner once
  // wrote 1.3800000000000001 as "1.38").
  for (double ms : {std::nextafter(1.38, 2.0), 1.0 / 3.0, 0.1 + 0.2}) {
    t.cycle_time_ms = ms;
    for (const auto& kv : setting_values(t, Fixed{})) values[kv.first] = kv.second;
    EXPECT_EQ(engine::options_from(values).tunables.cycle_time_ms, ms);
  }
}

// A score function of a configuration (bytes per second), fed to the tuner step by step the way
// the driver does: one step moves `bytes` in bytes/score seconds.
struct Simulated {
  std::function<double(const Tunables&)> score;
  double bytes = 1e8;
  Autotuner run(Autotuner t, std::vector<Tunables>* seen = nullptr) {
    for (int step = 0; step < 10000 && !t.done(); ++step) {
      const Tunables c = t.current();
      if (seen) seen->push_back(c);
      t.after_step(bytes, bytes / score(c));
    }
    return t;
  }
};

TEST(Autotuner, ScheduleStaysWithinItsPlannedStepsAndUnder300ByDefault) {
  const TunerOptions o = TunerOptions::from({});
  Autotuner t(parse_bounds(""), Fixed{}, engine::options_from({}).tunables, o);
  EXPECT_LE(t.planned_steps(), 300);
  Simulated sim{[](const Tunables&) { return 1e9; }};
  const Autotuner done = sim.run(t);
  EXPECT_TRUE(done.done());
  EXPECT_LE(done.steps_seen(), t.planned_steps());
  // 14 discrete trials (7 algorithms x cache on/off, the start among them), 10 Bayesian, and
  // the 3 finalists again (the start among them here: every score is equal).
  std::map<std::string, int> phases;
  for (const Trial& tr : done.trials()) {
    phases[tr.phase]++;
    EXPECT_EQ(tr.samples.size(), 3u);
  }
  EXPECT_EQ(phases["discrete"], 14);
  EXPECT_EQ(phases["bayes"], 10);
  EXPECT_EQ(phases["confirm"], 3);
  EXPECT_EQ(done.steps_seen(), 5 + 27 * 10);
  EXPECT_EQ(done.trials().front().config, engine::options_from({}).tunables);
}

TEST(Autotuner, FindsTheBestDiscreteChoiceExactlyAndItsBestContinuousRegion) {
  // Best at dbtree with the cache on; fusion threshold best near 4 MiB, cycle time near 0.3 ms.
  auto score = [](const Tunables& c) {
    double s = algorithm_of(c) == Algorithm::kDbtree ? 2.0 : 1.0;
    if (!c.cache_enabled) s *= 0.8;
    const double f = std::log2(static_cast<double>(c.fusion_threshold)) - 22.0;
    const double y = c.cycle_time_ms - 0.3;
    return 1e9 * s * std::exp(-0.05 * f * f - 0.2 * y * y);
  };
  TunerOptions o;
  o.bayes_trials = 15;
  Autotuner t(parse_bounds(""), Fixed{}, Tunables{}, o);
  const Autotuner done = Simulated{score}.run(t);
  const Tunables best = done.best().config;
  EXPECT_EQ(algorithm_of(best), Algorithm::kDbtree);
  EXPECT_TRUE(best.cache_enabled);
  EXPECT_EQ(done.current(), best);  // it ends on the best
  const double start = score(Tunables{});
  // The start scores 2e9 * exp(-0.05*25 - 0.2*0.49) = 0.53 of the optimum on dbtree; the search
  // must get most of the rest.
  EXPECT_GT(score(best), 0.9 * 2e9) << describe(best) << " start " << start;
}

TEST(Autotuner, EveryRankOnTheSameInputsTakesTheSamePath) {
  auto score = [](const Tunables& c) {
    return 1e9 / (1 + std::abs(std::log2(static_cast<double>(c.segment_bytes)) - 17)) *
           (algorithm_of(c) == Algorithm::kRing ? 1.5 : 1.0);
  };
  std::vector<Tunables> a, b;
  Simulated{score}.run(Autotuner(SearchSpace{}, Fixed{}, Tunables{}, TunerOptions{}), &a);
  Simulated{score}.run(Autotuner(SearchSpace{}, Fixed{}, Tunables{}, TunerOptions{}), &b);
  EXPECT_EQ(a, b);
}

TEST(Autotuner, FixedKnobsNeverChange) {
  Fixed f;
  f.algorithm = f.cache = f.cycle_time = true;
  Tunables start;
  start = with_algorithm(start, Algorithm::kRing);
  start.cache_enabled = false;
  start.cycle_time_ms = 2.5;
  std::vector<Tunables> seen;
  auto score = [](const Tunables& c) { return 1e9 / (1.0 + static_cast<double>(c.colors)); };
  const Autotuner done =
      Simulated{score}.run(Autotuner(SearchSpace{}, f, start, TunerOptions{}), &seen);
  for (const Tunables& c : seen) {
    EXPECT_EQ(algorithm_of(c), Algorithm::kRing);
    EXPECT_FALSE(c.cache_enabled);
    EXPECT_EQ(c.cycle_time_ms, 2.5);
  }
  // One discrete choice only: the start.
  EXPECT_EQ(done.trials().front().phase, "discrete");
  EXPECT_EQ(done.trials()[1].phase, "bayes");
}

TEST(Autotuner, TheScoreIsTheMedianOfSamplesAfterASettlingStep) {
  TunerOptions o;
  o.warmup_steps = 2;
  o.steps_per_sample = 2;
  o.samples = 3;
  o.bayes_trials = 0;
  o.finalists = 0;
  SearchSpace s;
  s.algorithms = {Algorithm::kAuto};
  s.cache = {true};
  Autotuner t(s, Fixed{}, Tunables{}, o);
  // Warm-up 2, then the settling step (huge, ignored), then samples of 2 steps: 1+3, 2+2, 9+9
  // seconds for 100 bytes a step -> 50, 50, 11.1 B/s; the median is 50.
  const double secs[] = {7, 7, 1000, 1, 3, 2, 2, 9, 9};
  for (double x : secs) t.after_step(100, x);
  ASSERT_TRUE(t.done());
  ASSERT_EQ(t.trials().size(), 1u);
  EXPECT_DOUBLE_EQ(t.trials()[0].samples[0], 50.0);
  EXPECT_DOUBLE_EQ(t.trials()[0].samples[1], 50.0);
  EXPECT_NEAR(t.trials()[0].samples[2], 200.0 / 18, 1e-12);
  EXPECT_DOUBLE_EQ(t.trials()[0].score, 50.0);
  EXPECT_EQ(t.steps_seen(), 9);
}

// A configuration whose first trial was lucky (a noisy machine) is measured again among the
// finalists, beside the start, and loses on the median of all its samples.
TEST(Autotuner, AFinalistsLuckyFirstTrialDoesNotDecide) {
  TunerOptions o;
  o.bayes_trials = 2;
  Autotuner t(SearchSpace{}, Fixed{}, Tunables{}, o);
  int ring_trials_started = 0;
  Tunables last;
  for (int step = 0; step < 1000 && !t.done(); ++step) {
    const Tunables c = t.current();
    const bool is_ring = algorithm_of(c) == Algorithm::kRing && c.cache_enabled;
    if (is_ring && (step == 0 || c != last)) ++ring_trials_started;
    last = c;
    // ring scores 3e9 in its first trial (luck) and 0.5e9 after; dbtree a steady 1.5e9;
    // everything else 1e9.
    double score = 1e9;
    if (is_ring) score = ring_trials_started <= 1 ? 3e9 : 0.5e9;
    if (algorithm_of(c) == Algorithm::kDbtree && c.cache_enabled) score = 1.5e9;
    t.after_step(1e8, 1e8 / score);
  }
  ASSERT_TRUE(t.done());
  int confirms = 0;
  for (const Trial& tr : t.trials()) confirms += tr.phase == "confirm";
  EXPECT_EQ(confirms, 3);  // ring, dbtree and the start (first of the 1e9 ties)
  EXPECT_EQ(algorithm_of(t.best().config), Algorithm::kDbtree) << describe(t.best().config);
  EXPECT_EQ(t.current(), t.best().config);
  EXPECT_NEAR(t.start_score(), 1e9, 1.0);
}

TEST(TunablesFile, RoundTripAndBadFilesNameTheField) {
  const std::string path = ::testing::TempDir() + "tessera_tuned_test.json";
  write_config(path, {{"TESSERA_CYCLE_TIME", "0.35"}, {"TESSERA_FUSION_THRESHOLD", "4194304"}},
               R"({"score_bytes_per_s": 12.5})");
  const SettingValues back = read_config(path);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back.at("TESSERA_CYCLE_TIME"), "0.35");
  EXPECT_EQ(back.at("TESSERA_FUSION_THRESHOLD"), "4194304");
  auto what = [&](const std::string& text) {
    std::ofstream(path) << text;
    try {
      read_config(path);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(what("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(what("{\"x\": 1}").find("\"knobs\""), std::string::npos);
  // Names are checked by init, which knows every layer's (test_settings.cc).
  EXPECT_NE(what(R"({"knobs": {"TESSERA_COLORS": [1]}})").find("knobs.TESSERA_COLORS"),
            std::string::npos);
  EXPECT_EQ(what(R"({"knobs": {"TESSERA_COLORS": 3}})"), "accepted");
  std::remove(path.c_str());
  EXPECT_THROW(read_config(path), InvalidArgument);
}

}  // namespace
}  // namespace tune
}  // namespace tessera
