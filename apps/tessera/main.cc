// tessera: one binary, subcommands. This file only parses the command line and reports errors;
// the work lives in the libraries (the benchmarks in bench/).
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
#include "apps/tessera/data_cli.h"
#include "apps/tessera/simulate_cli.h"
#include "apps/tessera/train_cli.h"
#include "bench/collectives.h"
#include "bench/data.h"
#include "bench/engine.h"
#include "bench/spatial.h"
#include "bench/train.h"
#include "common/error.h"
#include "common/settings.h"
#include "engine/options.h"
#include "runtime/session.h"
#include "tessera/torch.h"
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

namespace app = tessera::app;
namespace train = tessera::train;

// Every subcommand's options and the parsed commands.
struct Commands {
  app::BenchFlags bench_flags;
  train::TrainBenchOptions train_bench;
  train::DataBenchOptions data_bench;
  train::SpatialBenchOptions spatial_bench;
  tessera::data::MakeDatasetOptions make_dataset;
  train::TrainOptions train;
  app::SimulateOptions simulate;
  app::ExportOptions export_options;
  std::string config_path;
  CLI::App *bench = nullptr, *make_dataset_cmd = nullptr, *train_cmd = nullptr,
           *simulate_cmd = nullptr, *settings_cmd = nullptr, *export_cmd = nullptr;
};

void add_bench_command(CLI::App& cli, Commands& c) {
  tessera::bench::BenchOptions& bench = c.bench_flags.options;
  c.bench = cli.add_subcommand("bench", "benchmark a collective beside MPI's own");
  c.bench
      ->add_option("collective", bench.collective,
                   "allreduce, allgather, broadcast, reduce-scatter, alltoall, engine, train, "
                   "data or spatial")
      ->required()
      ->check(CLI::IsMember({"allreduce", "allgather", "broadcast", "reduce-scatter", "alltoall",
                             "engine", "train", "data", "spatial"}));
  app::add_collective_bench_flags(*c.bench, c.bench_flags);
  app::add_train_bench_options(*c.bench, c.train_bench);
  app::add_data_bench_options(*c.bench, c.data_bench);
  c.bench->add_option("--spatial", c.spatial_bench.grid,
                      "bench spatial: HxW grid of tiles (1x1: the ordinary model, whole image)");
  c.bench->add_option("--config", c.config_path, "settings from this file, as train");
  // A later -f/-b/... on the command line overrides an earlier one (scripts add their own).
  for (CLI::Option* opt : c.bench->get_options()) {
    if (opt->get_name() != "--algo" && opt->get_name() != "--workers" &&
        opt->get_name() != "--backend")
      opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
}

void add_commands(CLI::App& cli, Commands& c) {
  cli.require_subcommand(1);
  add_bench_command(cli, c);
  c.make_dataset_cmd = app::add_make_dataset_command(cli, c.make_dataset);
  c.train_cmd = app::add_train_command(cli, c.train);
  c.simulate_cmd = app::add_simulate_command(cli, c.simulate);
  c.train_cmd->add_option("--config", c.config_path,
                          "settings from this file (as tessera tune writes it) where the "
                          "environment does not set them");
  cli.add_subcommand("tune",
                     "tune the engine's knobs while training: tessera tune [--log F] [--output F] "
                     "[--bounds B] -- <train arguments>");
  c.settings_cmd = cli.add_subcommand(
      "settings", "print every TESSERA_* setting, its default, range and meaning (docs/knobs.md)");
  c.export_cmd = app::add_export_command(cli, c.export_options);
}

bool given(const CLI::App* cmd, const char* flag) { return cmd->get_option(flag)->count() > 0; }

// What bench train/data/spatial share of the one bench command line (bench/train.h).
train::SharedBenchFlags shared_bench_flags(const Commands& c) {
  train::SharedBenchFlags f;
  f.train = c.train_bench;
  f.batch_size_given = given(c.bench, "--batch-size");
  f.image_size_given = given(c.bench, "--image-size");
  f.model_given = given(c.bench, "--model");
  f.iters = c.bench_flags.options.iterations;
  f.warmup = c.bench_flags.options.warmup;
  f.iters_given = given(c.bench, "--iters");
  f.warmup_given = given(c.bench, "--warmup");
  f.device = c.bench_flags.options.device;
  f.json = c.bench_flags.options.json_path;
  return f;
}

// The commands that run on libtorch, after tessera::init.
int run_torch_command(Commands& c) {
  const std::string& what = c.bench_flags.options.collective;
  if (c.train_cmd->parsed()) {
    // Slides come in CSV manifests and train a classifier (ResNet-50, as Tsaris et al.); the
    // defaults voc and deeplabv3plus_resnet18 are data parallelism's.
    if (!c.train.spatial.empty() && !given(c.train_cmd, "--format")) c.train.input.format = "csv";
    if (!c.train.spatial.empty() && !given(c.train_cmd, "--model")) c.train.model = "resnet50";
    train::run_training(c.train);
  } else if (c.make_dataset_cmd->parsed()) {
    return tessera::rank() == 0 ? app::run_make_dataset(c.make_dataset) : 0;
  } else if (c.export_cmd->parsed()) {
    return app::run_export(c.export_options);
  } else if (what == "data") {
    train::apply_shared_flags(shared_bench_flags(c), &c.data_bench);
    train::run_data_benchmark(c.data_bench);
  } else if (what == "spatial") {
    train::apply_shared_flags(shared_bench_flags(c), &c.spatial_bench);
    train::run_spatial_benchmark(c.spatial_bench);
  } else {
    train::run_train_benchmark(train::train_bench_options(shared_bench_flags(c)));
  }
  return 0;
}

// The collectives' and the engine's benchmarks, in a session without an engine of its own.
int run_comm_bench(Commands& c, const tessera::SettingValues& settings) {
  app::finish_bench_options(c.bench_flags);
  const tessera::bench::BenchOptions& bench = c.bench_flags.options;
  if (bench.collective != "engine") return tessera::bench::run_bench(bench);
  tessera::bench::EngineBenchOptions eb;
  eb.engine = tessera::engine::options_from(settings);
  eb.json_path = bench.json_path;
  eb.steps = bench.iterations;
  eb.warmup = bench.warmup;
  return tessera::bench::run_engine_bench(eb);
}

// Opens the session (through tessera::init for the libtorch commands), runs the command, and
// ends the session with its error, so that the other ranks learn it instead of waiting.
int run_in_session(Commands& c, int argc, char** argv, const tessera::SettingValues& explicit_) {
  const std::string& what = c.bench_flags.options.collective;
  const bool uses_torch =
      c.train_cmd->parsed() || c.export_cmd->parsed() || c.make_dataset_cmd->parsed() ||
      (c.bench->parsed() && (what == "train" || what == "data" || what == "spatial"));
  int rc = 0;
  std::string error;
  std::unique_ptr<tessera::runtime::Session> session;
  try {
    if (uses_torch) {
      tessera::InitOptions init_options;
      init_options.settings = explicit_;
      init_options.config_file = c.config_path;
      tessera::init(init_options);
      rc = run_torch_command(c);
    } else {
      tessera::runtime::SessionOptions options;
      options.settings = explicit_;
      options.config_file = c.config_path;
      options.engine = false;  // the benchmarks make bare engines of their own
      options.argc = &argc;
      options.argv = &argv;
      session = std::make_unique<tessera::runtime::Session>(options);
      rc = run_comm_bench(c, session->settings());
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
  if (uses_torch) tessera::shutdown(error);
  if (session) session->end(error);
  return rc;
}

int run(int argc, char** argv, const tessera::SettingValues& explicit_settings) {
  CLI::App cli{"tessera: data- and spatially-parallel training of convolutional networks over MPI"};
  Commands c;
  add_commands(cli, c);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  if (c.settings_cmd->parsed()) {
    // The declarations themselves, as docs/knobs.md's table (a test keeps the two equal).
    std::fputs(tessera::settings_markdown(tessera::declared_settings()).c_str(), stdout);
    return 0;
  }
  if (c.simulate_cmd->parsed()) {
    // Sequential and MPI-free: runs as one process, no mpirun needed.
    try {
      return app::run_simulate(c.simulate);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessera: error: %s\n", e.what());
      return 2;
    }
  }
  return run_in_session(c, argc, argv, explicit_settings);
}

}  // namespace
