// The autotuner at work (TESSERA_AUTOTUNE=1): DistributedOptimizer::step calls after_step on
// every rank; it times the step, agrees the score inputs across ranks (the slowest rank's
// seconds), feeds the Autotuner, switches the engine with set_tunables at the same step
// everywhere, and on rank 0 logs each trial and finally writes the best configuration.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>

#include "comm/communicator.h"
#include "engine/engine.h"
#include "tune/autotuner.h"

namespace tessera {
namespace tune {

class StepTuner {
 public:
  // Collective over `world` (the engine's ranks), from the settings every rank agreed on (the
  // autotuner's own, and which of the engine's were given: those stay). Starts from the
  // engine's current tunables. Throws InvalidArgument for bad bounds.
  StepTuner(engine::Engine& engine, comm::Communicator& world, const SettingValues& values);
  // Collective: every rank after each optimizer step, the same number of times.
  void after_step();
  bool done() const { return tuner_.done(); }
  const Autotuner& tuner() const { return tuner_; }

 private:
  void log_trial(const Trial& t);
  void finish();

  engine::Engine& engine_;
  comm::Communicator& world_;
  std::string config_path_;  // TESSERA_AUTOTUNE_CONFIG
  Fixed fixed_;
  Autotuner tuner_;
  std::chrono::steady_clock::time_point last_;
  uint64_t last_bytes_ = 0;
  size_t logged_ = 0;
  bool finished_ = false;
  std::unique_ptr<std::ofstream> log_;
};

// The search space of TESSERA_AUTOTUNE_BOUNDS with the algorithms that cannot run on `world`
// removed.
SearchSpace usable_space(const SettingValues& values, const comm::Communicator& world);

}  // namespace tune
}  // namespace tessera
