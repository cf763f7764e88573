#include "tune/autotuner.h"

#include <algorithm>

#include "common/error.h"
#include "common/stats.h"
#include "tune/settings.h"

namespace tessera {
namespace tune {
TunerOptions TunerOptions::from(const SettingValues& values) {
  TunerOptions o;
  o.warmup_steps = static_cast<int>(kAutotuneWarmupSteps.get(values));
  o.steps_per_sample = static_cast<int>(kAutotuneStepsPerSample.get(values));
  o.samples = static_cast<int>(kAutotuneSamples.get(values));
  o.bayes_trials = static_cast<int>(kAutotuneBayesTrials.get(values));
  return o;
}

Autotuner::Autotuner(const SearchSpace& space, const Fixed& fixed, const Tunables& initial,
                     const TunerOptions& options)
    : space_(space), fixed_(fixed), o_(options), current_(initial), rng_(options.seed) {
  TESSERA_CHECK(
      o_.warmup_steps >= 0 && o_.steps_per_sample >= 1 && o_.samples >= 1 && o_.bayes_trials >= 0,
      "autotuner: warm-up steps must be >= 0, steps per sample and samples >= 1, "
      "Bayesian trials >= 0");
  if (!fixed_.algorithm && space_.algorithms.empty()) {
    throw InvalidArgument(
        "TESSERA_AUTOTUNE_BOUNDS field 'algorithm': no algorithm that can run on this "
        "communicator is left to search");
  }
  TESSERA_CHECK(fixed_.cache || !space_.cache.empty(),
                "TESSERA_AUTOTUNE_BOUNDS field 'cache': no value left to search");
  // Discrete choices: every algorithm x every cache setting, the starting one first so that
  // its score is the reference the others are compared with.
  std::vector<comm::Algorithm> algos =
      fixed_.algorithm ? std::vector<comm::Algorithm>{algorithm_of(initial)} : space_.algorithms;
  std::vector<bool> caches = fixed_.cache ? std::vector<bool>{initial.cache_enabled} : space_.cache;
  discrete_.push_back(initial);
  for (comm::Algorithm a : algos) {
    for (bool cache : caches) {
      Tunables c = initial;
      if (!fixed_.algorithm) c = with_algorithm(c, a);
      c.cache_enabled = cache;
      if (std::find(discrete_.begin(), discrete_.end(), c) == discrete_.end()) {
        discrete_.push_back(c);
      }
    }
  }
  start_trial_.config = initial;
  if (o_.warmup_steps == 0) {
    phase_ = Phase::kDiscrete;
    start(discrete_[next_discrete_++], "discrete");
  }
}

int Autotuner::planned_steps() const {
  const int per_trial = 1 + o_.samples * o_.steps_per_sample;
  // The Bayesian phase's size depends on the discrete winner's dimensions; count the most.
  return o_.warmup_steps +
         per_trial * (static_cast<int>(discrete_.size()) + o_.bayes_trials + o_.finalists + 1);
}

Trial Autotuner::best_of_phase() const {
  const Trial* b = &start_trial_;
  for (const Trial& t : trials_) {
    if (b == &start_trial_ || t.score > b->score) b = &t;
  }
  return *b;
}

Trial Autotuner::best() const {
  if (trials_.empty()) return start_trial_;
  // After the confirmation only the finalists compete, each by the worse of its two trials: one
  // lucky trial cannot carry a configuration, and each was measured as often as the others.
  bool confirmed = false;
  for (const Trial& t : trials_) confirmed = confirmed || t.phase == "confirm";
  Trial b;
  bool have = false;
  for (const Trial& t : trials_) {
    if (confirmed && t.phase != "confirm") continue;
    Trial all;
    all.config = t.config;
    all.phase = "all trials";
    all.first_step = t.first_step;
    all.score = t.score;
    for (const Trial& u : trials_) {
      if (u.config != t.config) continue;
      all.samples.insert(all.samples.end(), u.samples.begin(), u.samples.end());
      all.score = std::min(all.score, u.score);
    }
    if (!have || all.score > b.score) {
      b = all;
      have = true;
    }
  }
  return b;
}

double Autotuner::start_score() const {
  double score = 0;
  bool have = false;
  for (const Trial& t : trials_) {
    if (t.config != start_trial_.config) continue;
    score = have ? std::min(score, t.score) : t.score;
    have = true;
  }
  return score;
}

std::optional<Tunables> Autotuner::start(const Tunables& c, const char* phase) {
  const bool changed = c != current_;
  current_ = c;
  trial_ = Trial{};
  trial_.config = c;
  trial_.phase = phase;
  trial_.first_step = step_;
  trial_step_ = 0;
  sample_bytes_ = sample_seconds_ = 0;
  return changed ? std::optional<Tunables>(c) : std::nullopt;
}

std::optional<Tunables> Autotuner::after_step(double bytes, double seconds) {
  ++step_;
  switch (phase_) {
    case Phase::kDone:
      return std::nullopt;
    case Phase::kWarmup:
      if (step_ < o_.warmup_steps) return std::nullopt;
      phase_ = Phase::kDiscrete;
      return start(discrete_[next_discrete_++], "discrete");
    case Phase::kDiscrete:
    case Phase::kBayes:
    case Phase::kConfirm:
      break;
  }
  ++trial_step_;
  if (trial_step_ == 1) return std::nullopt;  // the settling step after a switch
  sample_bytes_ += bytes;
  sample_seconds_ += seconds;
  if ((trial_step_ - 1) % o_.steps_per_sample != 0) return std::nullopt;
  trial_.samples.push_back(sample_seconds_ > 0 ? sample_bytes_ / sample_seconds_ : 0.0);
  sample_bytes_ = sample_seconds_ = 0;
  if (static_cast<int>(trial_.samples.size()) < o_.samples) return std::nullopt;
  return finish_trial();
}

std::optional<Tunables> Autotuner::finish_trial() {
  trial_.score = median(trial_.samples);
  trials_.push_back(trial_);
  if (phase_ == Phase::kDiscrete) {
    if (next_discrete_ < discrete_.size()) return start(discrete_[next_discrete_++], "discrete");
    phase_ = Phase::kBayes;
    dims_ = continuous_dims(space_, fixed_, algorithm_of(best_of_phase().config));
  } else if (phase_ == Phase::kBayes) {
    ++bayes_done_;
  }
  if (phase_ == Phase::kBayes) {
    if (bayes_done_ < o_.bayes_trials && !dims_.empty()) return start(propose(), "bayes");
    phase_ = Phase::kConfirm;
    // The finalists: the best distinct configurations by their single trial, and the start.
    std::vector<Trial> ranked = trials_;
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const Trial& a, const Trial& b) { return a.score > b.score; });
    for (const Trial& t : ranked) {
      if (static_cast<int>(confirm_.size()) >= o_.finalists) break;
      if (std::find(confirm_.begin(), confirm_.end(), t.config) == confirm_.end()) {
        confirm_.push_back(t.config);
      }
    }
    if (o_.finalists > 0 &&
        std::find(confirm_.begin(), confirm_.end(), start_trial_.config) == confirm_.end()) {
      confirm_.push_back(start_trial_.config);
    }
  }
  if (phase_ == Phase::kConfirm && next_confirm_ < confirm_.size()) {
    return start(confirm_[next_confirm_++], "confirm");
  }
  phase_ = Phase::kDone;
  const Tunables winner = best().config;
  const bool changed = winner != current_;
  current_ = winner;
  return changed ? std::optional<Tunables>(winner) : std::nullopt;
}

Tunables Autotuner::propose() {
  // Observations: the trials of the discrete winner's algorithm and cache (the continuous knobs
  // vary only among these), in the unit cube.
  const Tunables base = best_of_phase().config;
  std::vector<std::vector<double>> xs;
  std::vector<double> ys;
  std::vector<Tunables> seen;
  for (const Trial& t : trials_) {
    if (t.config.allreduce != base.allreduce || t.config.cache_enabled != base.cache_enabled)
      continue;
    xs.push_back(to_unit(space_, dims_, t.config));
    ys.push_back(t.score);
    seen.push_back(t.config);
  }
  GaussianProcess gp;
  gp.fit(xs, ys);
  const double best_y = *std::max_element(ys.begin(), ys.end());
  const double scale = std::max(1e-12, std::abs(best_y));
  // Candidates: uniform over the cube and around the best point; the one with the highest
  // expected improvement that is not already measured (after rounding to knob values).
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<double> near(0.0, 0.08);
  const std::vector<double> best_x = to_unit(space_, dims_, base);
  double best_ei = -1;
  Tunables choice = base;
  for (int i = 0; i < 3000; ++i) {
    std::vector<double> u(dims_.size());
    for (size_t d = 0; d < u.size(); ++d) {
      u[d] = i % 3 == 0 ? std::min(1.0, std::max(0.0, best_x[d] + near(rng_))) : unit(rng_);
    }
    const Tunables c = from_unit(space_, dims_, u, base);
    if (std::find(seen.begin(), seen.end(), c) != seen.end()) continue;
    const GpPrediction p = gp.predict(to_unit(space_, dims_, c));
    const double ei = expected_improvement(p.mean, p.sd, best_y, 0.01 * scale);
    if (ei > best_ei) {
      best_ei = ei;
      choice = c;
    }
  }
  return choice;
}

}  // namespace tune
}  // namespace tessera
