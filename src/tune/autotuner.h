// The autotuner's search, as a pure state machine fed one training step at a time: warm-up at
// the starting settings, then every discrete choice (algorithm x cache) exhaustively at the
// starting continuous values, then Bayesian optimisation (Gaussian process, expected
// improvement) over the continuous knobs of the best discrete choice, then a confirmation: the
// few best configurations and the starting one measured once more, and the finalist whose worse
// trial scores highest wins. On a noisy machine the best
// of 24 scores is partly luck; measuring the finalists again, beside the start, keeps a lucky
// sample from deciding and keeps the start's slow first steps from flattering the gain. Each
// configuration is scored by the median of several samples of bytes allreduced per second, after
// one settling step that is not scored (the first step after a switch pays for it: the cache
// refills, the fusion buffer grows).
//
// Every rank runs its own Autotuner on the same inputs (the step driver agrees them first), so
// all of them switch at the same step to the same configuration without any message of their
// own; the engine's set_tunables makes rank 0's choice everyone's regardless.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tune/gaussian_process.h"
#include "tune/search_space.h"
#include "tune/settings.h"

namespace tessera {
namespace tune {

struct TunerOptions {
  int warmup_steps = static_cast<int>(kAutotuneWarmupSteps.fallback);
  int steps_per_sample = static_cast<int>(kAutotuneStepsPerSample.fallback);
  int samples = static_cast<int>(kAutotuneSamples.fallback);
  int bayes_trials = static_cast<int>(kAutotuneBayesTrials.fallback);
  int finalists = 3;  // configurations measured again (besides the start) before choosing
  uint32_t seed = 1;
  static TunerOptions from(const SettingValues& values);  // the declared defaults where unset
};

struct Trial {
  Tunables config;
  std::string phase;            // "discrete" or "bayes"
  std::vector<double> samples;  // bytes per second
  double score = 0;             // their median
  int first_step = 0;           // the step the configuration took effect
};

class Autotuner {
 public:
  // `algorithms` are those usable on the communicator (the search space's list, filtered by the
  // caller); throws InvalidArgument naming the field when nothing is left to search.
  Autotuner(const SearchSpace& space, const Fixed& fixed, const Tunables& start,
            const TunerOptions& options);

  // After each training step: the bytes allreduced during it and its seconds. Returns the
  // configuration to run from the next step on, when it changes.
  std::optional<Tunables> after_step(double bytes, double seconds);

  bool done() const { return phase_ == Phase::kDone; }
  const Tunables& current() const { return current_; }
  // The best configuration so far, with all its samples and, as its score, the worse of its
  // trials' scores; after the confirmation, the best finalist (the starting configuration,
  // unmeasured, until a trial completes).
  Trial best() const;
  // The starting configuration's score, the worse of its trials (0 before it is measured).
  double start_score() const;
  // Completed trials in order; trials()[i] completed at the step after_step returned it.
  const std::vector<Trial>& trials() const { return trials_; }
  // How many steps the whole search takes (warm-up included), fixed at construction.
  int planned_steps() const;
  int steps_seen() const { return step_; }

 private:
  enum class Phase { kWarmup, kDiscrete, kBayes, kConfirm, kDone };
  std::optional<Tunables> finish_trial();
  std::optional<Tunables> start(const Tunables& c, const char* phase);
  Tunables propose();

  SearchSpace space_;
  Fixed fixed_;
  TunerOptions o_;
  Phase phase_ = Phase::kWarmup;
  int step_ = 0;
  Tunables current_;
  std::vector<Tunables> discrete_;  // the discrete phase's queue
  size_t next_discrete_ = 0;
  std::vector<Dim> dims_;  // continuous dimensions of the Bayesian phase
  int bayes_done_ = 0;
  std::vector<Tunables> confirm_;  // the confirmation's queue
  size_t next_confirm_ = 0;
  Trial best_of_phase() const;  // the best single trial (the search phases' measure)
  // The trial being measured.
  Trial trial_;
  int trial_step_ = 0;  // steps since the switch
  double sample_bytes_ = 0, sample_seconds_ = 0;
  std::vector<Trial> trials_;
  Trial start_trial_;
  std::mt19937 rng_;
};

}  // namespace tune
}  // namespace tessera
