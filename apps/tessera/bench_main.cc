// tessera-bench <collective> [flags]: `tessera bench <collective>` (host or device buffers)
// without libtorch, so that a machine without the training stack's dependencies (the GPU
// check's) measures the collectives. Same flags, same table; settings from the environment.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "apps/tessera/bench_cli.h"
#include "comm/communicator.h"
#include "common/error.h"
#include "runtime/liveness.h"

int main(int argc, char** argv) {
  CLI::App app{"tessera-bench: a collective on host or device buffers beside its references"};
  tessera::app::BenchFlags flags;
  app.add_option("collective", flags.options.collective,
                 "allreduce, allgather, broadcast, reduce-scatter or alltoall")
      ->required()
      ->check(CLI::IsMember({"allreduce", "allgather", "broadcast", "reduce-scatter", "alltoall"}));
  tessera::app::add_collective_bench_flags(app, flags);
  CLI11_PARSE(app, argc, argv);
  int rc = 0;
  std::string error;
  try {
    const tessera::SettingValues settings = tessera::comm::init(&argc, &argv);
    tessera::runtime::start_liveness(settings);
    tessera::app::finish_bench_options(flags);
    rc = tessera::app::run_bench(flags.options);
  } catch (const std::exception& e) {
    error = e.what();
    rc = 2;
  }
  if (!error.empty()) std::fprintf(stderr, "tessera-bench: error: %s\n", error.c_str());
  tessera::runtime::stop_liveness(error);
  tessera::comm::finalize(error);
  return rc;
}
