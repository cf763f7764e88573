// tessera-bench <collective> [flags]: `tessera bench <collective>` (host or device buffers)
// without libtorch, so that a machine without the training stack's dependencies (the GPU
// check's) measures the collectives. Same flags, same table, the same session (every setting
// checked, liveness from the agreed TESSERA_HEARTBEAT_TIMEOUT).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "apps/tessera/bench_cli.h"
#include "common/error.h"
#include "runtime/session.h"

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
  std::unique_ptr<tessera::runtime::Session> session;
  try {
    tessera::runtime::SessionOptions options;
    options.engine = false;  // the collectives measure comm alone
    options.argc = &argc;
    options.argv = &argv;
    session = std::make_unique<tessera::runtime::Session>(options);
    tessera::app::finish_bench_options(flags);
    rc = tessera::bench::run_bench(flags.options);
  } catch (const std::exception& e) {
    error = e.what();
    rc = 2;
  }
  if (!error.empty()) std::fprintf(stderr, "tessera-bench: error: %s\n", error.c_str());
  if (session) session->end(error);  // with an error, the other ranks learn it
  return rc;
}
