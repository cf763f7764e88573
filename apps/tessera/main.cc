// tessera: one binary, subcommands. This file only parses the command line and reports errors;
// the work lives in the libraries (and bench_collectives.cc for the benchmark tables).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "apps/tessera/bench_cli.h"
#include "apps/tessera/bench_collectives.h"
#include "apps/tessera/bench_engine.h"
#include "apps/tessera/data_cli.h"
#include "apps/tessera/simulate_cli.h"
#include "apps/tessera/train_cli.h"
#include "comm/communicator.h"
#include "common/error.h"
#include "common/settings.h"
#include "engine/options.h"
#include "runtime/session.h"
#include "tessera/torch.h"
#include "train/spatial_benchmark.h"
#include "tune/settings.h"

namespace {

// CLI11 validator-free conversion of "64K"/"1MiB"/"4096" through the settings' byte parser.

// `tessera tune` passes its options here; every other command starts with none.
int run(int argc, char** argv, const tessera::SettingValues& explicit_settings);

// `tessera tune [--log F] [--output F] [--bounds B] -- <train args>`: the training run of
// `tessera train <train args>` (or `tessera bench train ...` when they start with "bench") with
// TESSERA_AUTOTUNE=1. Its options are explicit settings: like any command line they win over the
// environment (TESSERA_AUTOTUNE_LOG and _CONFIG take effect through TESSERA_AUTOTUNE=1 alone).
int run_tune(int argc, char** argv) {
  int dash = -1;
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      dash = i;
      break;
    }
  }
  CLI::App app{
      "tessera tune: tune the engine's knobs during training; `tessera tune [options] "
      "-- <tessera train arguments>`"};
  std::string log = "tessera-autotune.jsonl", output = tessera::tune::kAutotuneConfig.fallback,
              bounds;
  app.add_option("--log", log, "JSON lines of every configuration tried")->capture_default_str();
  app.add_option("--output", output, "the best configuration, for tessera train --config")
      ->capture_default_str();
  app.add_option("--bounds", bounds, "TESSERA_AUTOTUNE_BOUNDS (docs/knobs.md)");
  std::vector<std::string> own;
  // CLI11 takes a vector of arguments last first.
  for (int i = (dash < 0 ? argc : dash) - 1; i >= 2; --i) own.push_back(argv[i]);
  try {
    app.parse(own);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (dash < 0) {
    std::fprintf(stderr,
                 "tessera tune: give the training run after --, e.g. tessera tune -- --model "
                 "resnet18 --steps 400 (or: tessera tune -- bench train --model resnet18)\n");
    return 2;
  }
  namespace tune = tessera::tune;
  tessera::SettingValues settings = {{tune::kAutotune.name, "1"},
                                     {tune::kAutotuneLog.name, log},
                                     {tune::kAutotuneConfig.name, output}};
  if (!bounds.empty()) settings[tune::kAutotuneBounds.name] = bounds;
  std::vector<char*> args{argv[0]};
  static char train_word[] = "train";
  if (dash + 1 >= argc || std::string(argv[dash + 1]) != "bench") args.push_back(train_word);
  for (int i = dash + 1; i < argc; ++i) args.push_back(argv[i]);
  return run(static_cast<int>(args.size()), args.data(), settings);
}

}  // namespace

// `tessera run -np N [-H hosts] <program>`: the launcher is the Python package's
// (python/tessera/run.py composes the mpirun or srun command); this binary hands over to the one
// in its build tree, which also puts that package on the ranks' PYTHONPATH.
int run_launcher(int argc, char** argv) {
  std::vector<std::string> args = {TESSERA_PYTHON_EXECUTABLE, TESSERA_LAUNCHER_SCRIPT};
  for (int i = 2; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(&a[0]);
  cargs.push_back(nullptr);
  ::execv(cargs[0], cargs.data());
  std::fprintf(stderr, "tessera run: cannot start %s: %s\n", cargs[0], std::strerror(errno));
  return 2;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "tune") return run_tune(argc, argv);
  if (argc > 1 && std::string(argv[1]) == "run") return run_launcher(argc, argv);
  return run(argc, argv, {});
}

namespace {

int run(int argc, char** argv, const tessera::SettingValues& explicit_settings) {
  CLI::App app{"tessera: data- and spatially-parallel training of convolutional networks over MPI"};
  app.require_subcommand(1);

  tessera::app::BenchFlags bench_flags;
  tessera::app::BenchOptions& bench = bench_flags.options;
  CLI::App* bench_cmd = app.add_subcommand("bench", "benchmark a collective beside MPI's own");
  bench_cmd
      ->add_option("collective", bench.collective,
                   "allreduce, allgather, broadcast, reduce-scatter, alltoall, engine, train, "
                   "data or spatial")
      ->required()
      ->check(CLI::IsMember({"allreduce", "allgather", "broadcast", "reduce-scatter", "alltoall",
                             "engine", "train", "data", "spatial"}));
  tessera::app::add_collective_bench_flags(*bench_cmd, bench_flags);

  tessera::train::TrainBenchOptions train_bench;
  tessera::app::add_train_bench_options(*bench_cmd, train_bench);
  tessera::train::DataBenchOptions data_bench;
  tessera::app::add_data_bench_options(*bench_cmd, data_bench);
  tessera::train::SpatialBenchOptions spatial_bench;
  bench_cmd->add_option("--spatial", spatial_bench.grid,
                        "bench spatial: HxW grid of tiles (1x1: the ordinary model, whole image)");
  tessera::data::MakeDatasetOptions make_dataset;
  CLI::App* make_dataset_cmd = tessera::app::add_make_dataset_command(app, make_dataset);
  tessera::train::TrainOptions train;
  CLI::App* train_cmd = tessera::app::add_train_command(app, train);
  tessera::app::SimulateOptions simulate;
  CLI::App* simulate_cmd = tessera::app::add_simulate_command(app, simulate);
  std::string config_path;
  train_cmd->add_option("--config", config_path,
                        "settings from this file (as tessera tune writes it) where the "
                        "environment does not set them");
  bench_cmd->add_option("--config", config_path, "settings from this file, as train");
  app.add_subcommand("tune",
                     "tune the engine's knobs while training: tessera tune [--log F] [--output F] "
                     "[--bounds B] -- <train arguments>");
  CLI::App* settings_cmd = app.add_subcommand(
      "settings", "print every TESSERA_* setting, its default, range and meaning (docs/knobs.md)");
  tessera::app::ExportOptions export_options;
  CLI::App* export_cmd = tessera::app::add_export_command(app, export_options);

  // A later -f/-b/... on the command line overrides an earlier one (scripts add their own).
  for (CLI::Option* opt : bench_cmd->get_options()) {
    if (opt->get_name() != "--algo" && opt->get_name() != "--workers" &&
        opt->get_name() != "--backend")
      opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (settings_cmd->parsed()) {
    // The declarations themselves, as docs/knobs.md's table (a test keeps the two equal).
    std::fputs(tessera::settings_markdown(tessera::declared_settings()).c_str(), stdout);
    return 0;
  }
  if (simulate_cmd->parsed()) {
    // Sequential and MPI-free: runs as one process, no mpirun needed.
    try {
      return tessera::app::run_simulate(simulate);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessera: error: %s\n", e.what());
      return 2;
    }
  }
  int rc = 0;
  std::string error;
  const bool uses_torch =
      train_cmd->parsed() || export_cmd->parsed() || make_dataset_cmd->parsed() ||
      (bench_cmd->parsed() && (bench.collective == "train" || bench.collective == "data" ||
                               bench.collective == "spatial"));
  std::unique_ptr<tessera::runtime::Session> session;
  try {
    tessera::runtime::SessionOptions options;
    options.settings = explicit_settings;
    options.config_file = config_path;
    // The collective benchmarks measure comm and a bare engine of their own; the libtorch
    // commands run through tessera::init, which opens the same session with its engine.
    options.engine = false;
    options.argc = &argc;
    options.argv = &argv;
    tessera::SettingValues settings;
    if (uses_torch) {
      tessera::InitOptions init_options;
      init_options.settings = explicit_settings;
      init_options.config_file = config_path;
      tessera::init(init_options);
      settings = tessera::settings();
    } else {
      session = std::make_unique<tessera::runtime::Session>(options);
      settings = session->settings();
    }
    if (train_cmd->parsed()) {
      // Slides come in CSV manifests and train a classifier (ResNet-50, as Tsaris et al.); the
      // defaults voc and deeplabv3plus_resnet18 are data parallelism's.
      if (!train.spatial.empty() && train_cmd->get_option("--format")->count() == 0)
        train.format = "csv";
      if (!train.spatial.empty() && train_cmd->get_option("--model")->count() == 0)
        train.model = "resnet50";
      tessera::train::run_training(train);
    } else if (make_dataset_cmd->parsed()) {
      rc = tessera::rank() == 0 ? tessera::app::run_make_dataset(make_dataset) : 0;
    } else if (bench_cmd->parsed() && bench.collective == "data") {
      // Shared with bench train, whose defaults (32 at 224^2) suit a model benchmark, not this.
      if (bench_cmd->get_option("--batch-size")->count() > 0)
        data_bench.batch_size = train_bench.batch_size;
      if (bench_cmd->get_option("--image-size")->count() > 0)
        data_bench.image_size = train_bench.image_size;
      data_bench.threads = train_bench.threads;
      data_bench.device = bench.device;  // the reference step's, with these two of bench train
      data_bench.precision = train_bench.precision;
      data_bench.memory_format = train_bench.memory_format;
      data_bench.json = bench.json_path;
      tessera::train::run_data_benchmark(data_bench);
    } else if (bench_cmd->parsed() && bench.collective == "spatial") {
      // Shared with bench train, whose defaults (batch 32 at 224^2) are not this one's.
      if (bench_cmd->get_option("--batch-size")->count() > 0)
        spatial_bench.batch_size = train_bench.batch_size;
      if (bench_cmd->get_option("--image-size")->count() > 0)
        spatial_bench.image_size = train_bench.image_size;
      if (bench_cmd->get_option("--model")->count() > 0) spatial_bench.model = train_bench.model;
      if (bench_cmd->get_option("--iters")->count() > 0) spatial_bench.iters = bench.iterations;
      if (bench_cmd->get_option("--warmup")->count() > 0) spatial_bench.warmup = bench.warmup;
      spatial_bench.threads = train_bench.threads;
      spatial_bench.json = bench.json_path;
      spatial_bench.device = bench.device;  // one --device for every bench
      tessera::train::run_spatial_benchmark(spatial_bench);
    } else if (export_cmd->parsed()) {
      rc = tessera::app::run_export(export_options);
    } else if (bench_cmd->parsed() && bench.collective == "train") {
      if (bench_cmd->get_option("--iters")->count() > 0) train_bench.iters = bench.iterations;
      if (bench_cmd->get_option("--warmup")->count() > 0) train_bench.warmup = bench.warmup;
      train_bench.json = bench.json_path;
      train_bench.device = bench.device;  // one --device for every bench
      tessera::train::run_train_benchmark(train_bench);
    } else if (bench_cmd->parsed()) {
      tessera::app::finish_bench_options(bench_flags);
      if (bench.collective == "engine") {
        tessera::app::EngineBenchOptions eb;
        eb.engine = tessera::engine::options_from(settings);
        eb.json_path = bench.json_path;
        eb.steps = bench.iterations;
        eb.warmup = bench.warmup;
        rc = tessera::app::run_engine_bench(eb);
      } else {
        rc = tessera::app::run_bench(bench);
      }
    }
  } catch (const tessera::Error& e) {
    error = e.what();
    rc = 2;
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
    rc = 2;
  } catch (const std::exception& e) {
    error = std::string("unexpected: ") + e.what();
    rc = 3;
  }
  if (!error.empty()) {
    std::fprintf(stderr, "tessera: error: %s\n", error.c_str());
    std::fflush(stderr);
  }
  // With an error, the other ranks learn it (and end) instead of waiting on this one.
  if (uses_torch) {
    tessera::shutdown(error);
  } else if (session) {
    session->end(error);
  }
  return rc;
}

}  // namespace
