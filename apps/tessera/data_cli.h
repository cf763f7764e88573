// The command lines of `tessera make-dataset` and the options `tessera bench data` adds: flag
// definitions only; the work is in src/data and src/train.
#pragma once

#include <CLI/CLI.hpp>

#include "bench/data.h"
#include "data/make_dataset.h"

namespace tessera {
namespace app {

CLI::App* add_make_dataset_command(CLI::App& app, data::MakeDatasetOptions& options);
// Writes the data set (rank 0 only; the others wait for nothing). Returns the exit status.
int run_make_dataset(const data::MakeDatasetOptions& options);

// Adds --data, --format, --workers, ... to `bench` for `tessera bench data` (--batch-size,
// --image-size and --threads are shared with `bench train`).
void add_data_bench_options(CLI::App& bench, train::DataBenchOptions& options);

}  // namespace app
}  // namespace tessera
