// The command lines of `tessera train`, `tessera export` and the options `tessera bench train`
// adds: flag definitions only; the work is in src/train and src/models.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "bench/train.h"
#include "train/trainer.h"

namespace tessera {
namespace app {

CLI::App* add_train_command(CLI::App& app, train::TrainOptions& options);

struct ExportOptions {
  std::string model = "resnet50";
  int64_t num_classes = 0;  // 0: 1000 (classification) or 21 (segmentation)
  std::string checkpoint;   // a tessera checkpoint to take the weights from
  std::string init_from;    // or a torch.save'd state_dict
  std::string output;
};
CLI::App* add_export_command(CLI::App& app, ExportOptions& options);
// Writes the state_dict (rank 0 only). Returns the exit status.
int run_export(const ExportOptions& options);

// Adds --model, --batch-size, --image-size, ... to `bench` for `tessera bench train`.
void add_train_bench_options(CLI::App& bench, train::TrainBenchOptions& options);

}  // namespace app
}  // namespace tessera
