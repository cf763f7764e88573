// `tessera bench <collective>`: nccl-tests-style tables of every algorithm beside MPI's own.
#pragma once

#include <string>
#include <vector>

#include "common/dtype.h"

namespace tessera {
namespace app {

struct BenchOptions {
  std::string collective = "allreduce";  // allreduce allgather broadcast reduce-scatter alltoall
  size_t min_bytes = 8;
  size_t max_bytes = size_t{128} << 20;
  double factor = 2.0;                             // -f: size multiplier between rows
  int iterations = 20;                             // timed calls per row
  int warmup = 5;                                  // untimed calls per row
  std::vector<std::string> algorithms = {"auto"};  // allreduce: names or "all"
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::string json_path;   // --json FILE
  bool calibrate = false;  // allreduce: measure and write the cost table
  std::string table_path = "tessera_cost_table.json";
};

// Runs under mpirun; rank 0 prints. Returns the process exit code (non-zero if any #wrong).
int run_bench(const BenchOptions& options);

}  // namespace app
}  // namespace tessera
