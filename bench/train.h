// `tessera bench train`: synthetic-data training throughput in the manner of Horovod's
// pytorch_synthetic_benchmark.py (same warm-up, iterations of several batches, img/s per rank
// and in total with a 95% interval), so the two read side by side with DDP's
// (bench/ddp_synthetic.py).
#pragma once

#include <string>

namespace tessera {
namespace train {

struct TrainBenchOptions {
  std::string model = "resnet50";
  int64_t batch_size = 32;
  int64_t image_size = 224;
  int warmup = 10;  // batches before timing
  int iters = 10;   // timed iterations
  int batches_per_iter = 10;
  int threads = 1;
  int64_t num_classes = 0;  // 0: 1000 (classification) or 21 (segmentation)
  std::string compression = "none";
  int groups = 0;
  std::string device = "cpu";                // --device (train/device/device_choice.h)
  std::string precision = "f32";             // f32, f64, bf16 (train/device/mixed_precision.h)
  std::string memory_format = "contiguous";  // train/device/memory_layout.h
  bool cudnn_benchmark = false;
  bool engine = true;  // false: plain SGD, no DistributedOptimizer (one rank only)
  std::string json;    // also write the figures here (rank 0)
};

struct TrainBenchResult {
  double per_rank_mean = 0, per_rank_ci = 0;  // img/s, 1.96 standard deviations
  double total_mean = 0, total_ci = 0;
  double minor_faults_per_batch = 0;  // this rank's page faults, a measure of the policy
};

TrainBenchResult run_train_benchmark(const TrainBenchOptions& options);

// `tessera bench train|data|spatial` share one command line, whose flags land in a
// TrainBenchOptions (bench train's defaults: batch 32 at 224^2) beside the collectives' --iters,
// --warmup, --device and --json. Each benchmark takes from it what it shares, the sizes only
// where they were given (its own defaults suit it better than a model benchmark's).
struct SharedBenchFlags {
  TrainBenchOptions train;
  bool batch_size_given = false, image_size_given = false, model_given = false;
  int iters = 0, warmup = 0;                       // the collectives' --iters and --warmup...
  bool iters_given = false, warmup_given = false;  // ...where given
  std::string device = "cpu";
  std::string json;
};
TrainBenchOptions train_bench_options(const SharedBenchFlags& flags);
struct DataBenchOptions;
struct SpatialBenchOptions;
void apply_shared_flags(const SharedBenchFlags& flags, DataBenchOptions* data);
void apply_shared_flags(const SharedBenchFlags& flags, SpatialBenchOptions* spatial);

}  // namespace train
}  // namespace tessera
