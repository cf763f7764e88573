#include "tune/step_tuner.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "comm/collectives.h"
#include "comm/selector.h"
#include "common/error.h"
#include "tune/config_file.h"

namespace tessera {
namespace tune {
namespace {

nlohmann::json config_json(const Config& c) {
  return {{"algorithm", comm::algorithm_name(c.algorithm)},
          {"cache", c.cache},
          {"fusion_threshold", c.fusion_threshold},
          {"cycle_time_ms", c.cycle_time_ms},
          {"segment_bytes", c.segment_bytes},
          {"colors", c.colors}};
}

}  // namespace

SearchSpace usable_space(const Knobs& k, const comm::Communicator& world) {
  SearchSpace s = parse_bounds(k.autotune_bounds);
  const comm::CommShape shape{world.size(), world.num_nodes(), world.local_size(),
                              world.uniform_nodes()};
  std::vector<comm::Algorithm> keep;
  for (comm::Algorithm a : s.algorithms) {
    if (a == comm::Algorithm::kAuto || comm::can_use(a, shape)) keep.push_back(a);
  }
  s.algorithms = keep;
  return s;
}

StepTuner::StepTuner(engine::Engine& engine, comm::Communicator& world, const Knobs& k)
    : engine_(engine),
      world_(world),
      knobs_(k),
      fixed_(Fixed::from_knobs(k)),
      tuner_(usable_space(k, world), fixed_, config_from_knobs(k), TunerOptions::from_knobs(k)),
      last_(std::chrono::steady_clock::now()),
      last_bytes_(engine.stats().allreduce_bytes) {
  if (world_.rank() == 0 && !k.autotune_log.empty()) {
    log_ = std::make_unique<std::ofstream>(k.autotune_log, std::ios::trunc);
    TESSERA_CHECK(log_->good(), "TESSERA_AUTOTUNE_LOG: cannot write '", k.autotune_log, "'");
  }
}

void StepTuner::after_step() {
  if (finished_) return;
  const auto now = std::chrono::steady_clock::now();
  const uint64_t bytes_now = engine_.stats().allreduce_bytes;
  // The slowest rank's step is the step: every rank scores with it, so every rank's Autotuner
  // takes the same path.
  double seconds = std::chrono::duration<double>(now - last_).count();
  comm::AllreduceOptions mx;
  mx.op = ReduceOp::kMax;
  comm::allreduce(world_, &seconds, &seconds, 1, DataType::kFloat64, mx);
  const double bytes = static_cast<double>(bytes_now - last_bytes_);
  const std::optional<Config> next = tuner_.after_step(bytes, seconds);
  while (logged_ < tuner_.trials().size()) log_trial(tuner_.trials()[logged_++]);
  if (next) engine_.set_tunables(to_tunables(*next, fixed_, knobs_));
  if (tuner_.done()) finish();
  // The tuner's own messages and the switch are not charged to the next step.
  last_ = std::chrono::steady_clock::now();
  last_bytes_ = engine_.stats().allreduce_bytes;
}

void StepTuner::log_trial(const Trial& t) {
  if (!log_) return;
  *log_ << nlohmann::json{{"trial", logged_},
                          {"phase", t.phase},
                          {"first_step", t.first_step},
                          {"config", config_json(t.config)},
                          {"samples_bytes_per_s", t.samples},
                          {"score_bytes_per_s", t.score}}
               .dump()
        << "\n";
  log_->flush();
}

void StepTuner::finish() {
  finished_ = true;
  if (world_.rank() != 0) return;
  const Trial best = tuner_.best();
  const double start = tuner_.start_score();  // over both of its trials
  const double gain = start > 0 ? best.score / start : 0;
  const nlohmann::json info = {{"score_bytes_per_s", best.score},
                               {"start_score_bytes_per_s", start},
                               {"gain", gain},
                               {"steps", tuner_.steps_seen()},
                               {"trials", tuner_.trials().size()},
                               {"config", config_json(best.config)}};
  if (log_) {
    nlohmann::json done = info;
    done["done"] = true;
    *log_ << done.dump() << "\n";
    log_->flush();
  }
  write_config(knobs_.autotune_config, knob_values(best.config, fixed_), info.dump());
  std::printf(
      "autotune: %s scores %.3g B/s, %.2fx the starting settings, after %d steps and %zu "
      "trials; written to %s\n",
      describe(best.config).c_str(), best.score, gain, tuner_.steps_seen(), tuner_.trials().size(),
      knobs_.autotune_config.c_str());
  std::fflush(stdout);
}

}  // namespace tune
}  // namespace tessera
