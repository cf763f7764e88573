// `tessera simulate`: the scaling simulator's command line (flags, the workload from a model's
// real parameter list, the table, JSON and SVG); the model itself is src/tune.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "common/settings.h"
#include "engine/options.h"

namespace tessera {
namespace app {

struct SimulateOptions {
  std::string preset = "summit";
  std::string machine_file;  // JSON, instead of the preset
  std::string cost_table;    // for --preset local (TESSERA_COST_TABLE's format)
  std::string model = "resnet50";
  std::string timeline;  // a TESSERA_TIMELINE of `tessera train`: the workload instead of --model
  std::string gpus = "1,6,12,24,48,96,132";
  double batch_size = 0;    // per GPU; 0: the model's default
  double images_per_s = 0;  // per GPU, the compute rate; 0: the model's default
  std::string fusion_threshold = format_bytes(engine::kFusionThreshold.fallback);
  double cycle_time_ms = engine::kCycleTime.fallback;
  std::string algorithm = "auto";
  double jitter = -1;  // overrides the machine's compute_jitter when >= 0
  std::string json;
  std::string svg;
  // Validation mode: predicted allreduce times at these sizes and the `tessera bench engine`
  // step, for the GPU counts, beside nothing else.
  std::string allreduce_sizes;
  bool engine_bench = false;
};

CLI::App* add_simulate_command(CLI::App& app, SimulateOptions& options);
// Rank 0's work (the simulator is sequential). Returns the exit status.
int run_simulate(const SimulateOptions& options);

}  // namespace app
}  // namespace tessera
