// `tessera bench <collective>`: nccl-tests-style tables of every algorithm beside MPI's own.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace tessera {
namespace comm {
class Communicator;
}
}  // namespace tessera

namespace tessera {
namespace bench {

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
  // Where the buffers live: cpu (host memory, tessera's algorithms beside MPI's), cuda (this
  // rank's GPU: local rank % GPUs), or fake (the test device, to check the bench itself).
  std::string device = "cpu";
  std::vector<std::string> backends = {"all"};  // device: names of device_selector.h, or all
};

// Runs under mpirun; rank 0 prints. Returns the process exit code (non-zero if any #wrong).
int run_bench(const BenchOptions& options);
// The same for device buffers (bench_device.cc): each backend that can run here beside a
// host round trip of the same bytes, and the copy bandwidths that bound them.
int run_device_bench(const BenchOptions& options);

// Shared by both benches.
// Value rank r contributes at element i; small integers, exact in every dtype.
double input_value(int r, size_t i);
double expected_allreduce(ReduceOp op, int n, size_t i);
// Elements whose value differs from `expected` (relative 1e-2 for f16/bf16, exact otherwise;
// integers compare after the same wrap-around the dtype applies).
long count_wrong(DataType dtype, const void* data, size_t count,
                 const std::function<double(size_t)>& expected);
// The row's time per call: calls run in batches long enough (>= 50 us) for the clock's
// resolution not to matter; the median over `iterations` batches on each rank, then the
// slowest rank's. Every rank runs the same number of calls (the batch size is agreed).
double time_calls(comm::Communicator& world, int warmup, int iterations,
                  const std::function<void()>& fn);
// The row sizes from min to max by factor, multiples of `granule`.
std::vector<size_t> sizes(const BenchOptions& o, size_t granule);
// nccl-tests' bus bandwidth factor of `collective` on n ranks.
double bus_factor(const std::string& collective, int n);

}  // namespace bench
}  // namespace tessera
