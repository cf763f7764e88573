// `tessera bench spatial`: one ResNet training step on one large image, cut over a grid of ranks
// (spatial decomposition) or whole on one rank (the reference: the ordinary model, --spatial
// 1x1). Prints the step's median time, the share spent in halo exchanges and in group sums, and
// the peak resident memory per rank; scripts/bench_spatial.sh runs the grid and the reference
// and prints their ratios (docs/benchmarks.md).
#pragma once

#include <cstdint>
#include <string>

namespace tessera {
namespace train {

struct SpatialBenchOptions {
  std::string model = "resnet50";
  std::string grid = "1x2";  // "1x1": the ordinary model on the whole image
  int64_t image_size = 2048;
  int64_t batch_size = 1;      // images per data group
  int threads = 1;             // intra-op threads per rank
  int warmup = 1;              // steps before timing
  int iters = 3;               // timed steps
  std::string device = "cpu";  // --device (train/device/device_choice.h)
  std::string json;            // also write the figures here (rank 0)
};

struct SpatialBenchResult {
  double step_s = 0;   // median over the timed steps (the slowest rank's)
  double halo_s = 0;   // per step, median (rank 0's)
  double group_s = 0;  // per step, median (rank 0's)
  double forward_s = 0, backward_s = 0, update_s = 0;  // rank 0's medians
  double peak_rss_gib = 0;                             // largest over ranks
  double start_rss_gib = 0;                            // before the first step, largest over ranks
  double peak_device_gib = 0;  // GPU runs: the tensors' peak on the device, largest over ranks
};

SpatialBenchResult run_spatial_benchmark(const SpatialBenchOptions& options);

}  // namespace train
}  // namespace tessera
