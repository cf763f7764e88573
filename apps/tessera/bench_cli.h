// The flags of `tessera bench <collective>`, shared by the tessera binary and tessera-bench (the
// collectives' bench alone, built without libtorch: the GPU check's machine has no OpenCV).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "bench/collectives.h"

namespace tessera {
namespace app {

struct BenchFlags {
  bench::BenchOptions options;
  // Text until finish_bench_options parses it; the defaults are bench::BenchOptions'..
  std::string min_bytes, max_bytes, dtype = "f32", op = "sum";
  std::vector<std::string> algorithms;
};

// Every flag but the positional collective (which differs between the two binaries).
void add_collective_bench_flags(CLI::App& cmd, BenchFlags& flags);
// Parses the text flags into flags.options; InvalidArgument quoting a bad one.
void finish_bench_options(BenchFlags& flags);

}  // namespace app
}  // namespace tessera
