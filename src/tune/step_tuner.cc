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

nlohmann::json config_json(const Tunables& t) { return nlohmann::json::parse(engine::to_json(t)); }

}  // namespace

SearchSpace usable_space(const SettingValues& values, const comm::Communicator& world) {
  SearchSpace s = parse_bounds(kAutotuneBounds.get(values));
  const comm::CommShape shape{world.size(), world.num_nodes(), world.local_size(),
                              world.uniform_nodes()};
  std::vector<comm::Algorithm> keep;
  for (comm::Algorithm a : s.algorithms) {
    if (a == comm::Algorithm::kAuto || comm::can_use(a, shape)) keep.push_back(a);
  }
  s.algorithms = keep;
  return s;
}

StepTuner::StepTuner(engine::Engine& engine, comm::Communicator& world, const SettingValues& values)
    : engine_(engine),
      world_(world),
      config_path_(kAutotuneConfig.get(values)),
      fixed_(Fixed::from(values)),
      tuner_(usable_space(values, world), fixed_, engine.tunables(), TunerOptions::from(values)),
      last_(std::chrono::steady_clock::now()),
      last_bytes_(engine.stats().allreduce_bytes) {
  const std::string log_path = kAutotuneLog.get(values);
  if (world_.rank() == 0 && !log_path.empty()) {
    log_ = std::make_unique<std::ofstream>(log_path, std::ios::trunc);
    TESSERA_CHECK(log_->good(), kAutotuneLog.name, ": cannot write '", log_path, "'");
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
  const std::optional<Tunables> next = tuner_.after_step(bytes, seconds);
  while (logged_ < tuner_.trials().size()) log_trial(tuner_.trials()[logged_++]);
  if (next) engine_.set_tunables(*next);
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
  write_config(config_path_, setting_values(best.config, fixed_), info.dump());
  std::printf(
      "autotune: %s scores %.3g B/s, %.2fx the starting settings, after %d steps and %zu "
      "trials; written to %s\n",
      describe(best.config).c_str(), best.score, gain, tuner_.steps_seen(), tuner_.trials().size(),
      config_path_.c_str());
  std::fflush(stdout);
}

}  // namespace tune
}  // namespace tessera
