// `tessera bench data`: how many samples per second the input pipeline delivers from memory with
// 1, 2, ... workers, beside the samples per second a training step of the reference model
// consumes at the same batch and size, measured in the same run (the pipeline must stay ahead
// of the step). Also the first pass's rate (reading the files) and the bytes read from files
// after it (0: the store serves everything from memory).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {
namespace train {

struct DataBenchOptions {
  std::string data;
  std::string format = "voc";
  std::vector<int> workers = {1, 2};
  int64_t batch_size = 8;
  int64_t image_size = 64;
  int64_t batches = 0;  // per measurement; 0: one epoch of this rank's shard
  int repeats = 3;      // measurements per worker count (the median is printed)
  bool keep_decoded = false;
  std::string reference_model = "deeplabv3plus_resnet18";  // "none": no reference step
  int reference_steps = 6;
  int threads = 1;  // the reference step's intra-op threads
  // Where the reference step runs, and how (bench's --device, --precision, --memory-format): on
  // a GPU the workers also pin each batch, as tessera train's do there.
  std::string device = "cpu";
  std::string precision = "f32";
  std::string memory_format = "contiguous";
  uint64_t seed = 42;
  std::string json;
};

struct DataBenchRow {
  int workers = 0;
  double samples_per_s = 0;  // median
  double ratio_to_step = 0;  // samples_per_s / the step's consumption
  uint64_t file_bytes = 0;   // read from files during this row's measurements
};

struct DataBenchResult {
  double first_pass_samples_per_s = 0;
  uint64_t first_pass_bytes = 0;
  double step_samples_per_s = 0;  // the reference step's consumption (0 without one)
  std::vector<DataBenchRow> rows;
};

DataBenchResult run_data_benchmark(const DataBenchOptions& options);

}  // namespace train
}  // namespace tessera
