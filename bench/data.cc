#include "bench/data.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "common/error.h"
#include "common/stats.h"
#include "data/prefetcher.h"
#include "data/sample_source.h"
#include "data/sampler.h"
#include "models/registry.h"
#include "tessera/torch.h"
#include "train/device/autocast.h"
#include "train/device/device_feed.h"
#include "train/device/memory_layout.h"
#include "train/device/mixed_precision.h"
#include "train/device/run_device.h"

namespace tessera {
namespace train {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs `batches` batches of epoch `epoch` through a pipeline of `workers` (pinning each batch
// when `pinned`); samples per second.
double pump(data::SampleSource& src, int workers, int64_t batch, int64_t batches, int64_t epoch,
            uint64_t seed, bool pinned) {
  const std::vector<int64_t> positions =
      data::shard_epoch_order(static_cast<int64_t>(src.store().size()), seed, 0, epoch);
  const int64_t per_epoch = static_cast<int64_t>(positions.size()) / batch;
  data::Prefetcher<data::Batch> pipe(
      [&](int64_t k) {
        data::Batch b = src.make_batch(positions, static_cast<size_t>((k % per_epoch) * batch),
                                       static_cast<size_t>(batch), epoch);
        return pinned ? pinned_batch(b) : b;
      },
      workers, 2 * workers, 0, batches, timeout_s());
  const Clock::time_point t0 = Clock::now();
  int64_t samples = 0;
  for (int64_t k = 0; k < batches; ++k) samples += pipe.next().images.size(0);
  return static_cast<double>(samples) / since(t0);
}

// Samples per second one training step of `model` consumes (forward, backward, SGD update) on
// --device, in --precision and --memory-format.
double step_rate(const DataBenchOptions& o, const torch::Device& device, int64_t num_classes,
                 bool segmentation) {
  const Precision precision = parse_precision(o.precision);
  const MemoryFormat layout = parse_memory_format(o.memory_format);
  models::ModelSpec spec;
  spec.name = o.reference_model;
  spec.num_classes = num_classes;
  models::Model model = models::make_model(spec);
  TESSERA_CHECK((model.task() == models::Task::kSegmentation) == segmentation, "--reference-model ",
                o.reference_model, " does not fit the data set's task");
  model.module().to(device, precision.master);
  to_memory_format(model.module(), layout);
  torch::optim::SGD sgd(model.module().parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  model.module().train();
  const int64_t s = o.image_size, b = o.batch_size;
  torch::Tensor x =
      in_memory_format(torch::randn({b, 3, s, s}).to(device, precision.master), layout);
  torch::Tensor y = (segmentation ? torch::randint(num_classes, {b, s, s}, torch::kLong)
                                  : torch::randint(num_classes, {b}, torch::kLong))
                        .to(device);
  auto step = [&] {
    sgd.zero_grad();
    torch::Tensor out;
    {
      AutocastScope amp(device, precision.compute);
      out = model.forward(x);
    }
    torch::nn::functional::cross_entropy(out.to(precision.master), y).backward();
    sgd.step();
  };
  step();
  step();
  synchronize_device(device);
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < o.reference_steps; ++i) step();
  synchronize_device(device);
  return static_cast<double>(b * o.reference_steps) / since(t0);
}

// Rank 0's table of rates by worker count beside the training step's, and --json.
void report(const DataBenchOptions& o, const DataBenchResult& r) {
  {
    for (const DataBenchRow& row : r.rows) {
      std::printf("%8d %14.1f %16.2f %18llu\n", row.workers, row.samples_per_s, row.ratio_to_step,
                  static_cast<unsigned long long>(row.file_bytes));
    }
    if (r.step_samples_per_s > 0) {
      std::printf(
          "reference: one %s training step (batch %lld, %lldx%lld, %d thread%s, %s, %s, %s) "
          "consumes %.1f samples/s\n",
          o.reference_model.c_str(), static_cast<long long>(o.batch_size),
          static_cast<long long>(o.image_size), static_cast<long long>(o.image_size), o.threads,
          o.threads == 1 ? "" : "s", o.device.c_str(), o.precision.c_str(), o.memory_format.c_str(),
          r.step_samples_per_s);
    }
    std::fflush(stdout);
  }
  if (!o.json.empty()) {
    nlohmann::json j;
    j["first_pass_samples_per_s"] = r.first_pass_samples_per_s;
    j["first_pass_bytes"] = r.first_pass_bytes;
    j["step_samples_per_s"] = r.step_samples_per_s;
    for (const DataBenchRow& row : r.rows) {
      j["rows"].push_back({{"workers", row.workers},
                           {"samples_per_s", row.samples_per_s},
                           {"ratio_to_step", row.ratio_to_step},
                           {"file_bytes", row.file_bytes}});
    }
    std::ofstream(o.json) << j.dump(2) << "\n";
  }
}

}  // namespace

DataBenchResult run_data_benchmark(const DataBenchOptions& o) {
  TESSERA_CHECK(!o.data.empty(), "bench data needs --data DIR");
  TESSERA_CHECK(!o.workers.empty(), "bench data needs --workers");
  for (int w : o.workers) TESSERA_CHECK(w >= 1, "--workers must be >= 1, got ", w);
  TESSERA_CHECK(o.batch_size >= 1 && o.repeats >= 1, "--batch-size and --repeats must be >= 1");
  const int me = is_initialized() ? rank() : 0;
  const int world = is_initialized() ? size() : 1;
  const data::DataSet set = data::open_dataset(o.data, data::parse_format(o.format), "train");
  data::SourceOptions so;
  so.image_size = o.image_size;
  so.seed = o.seed;
  so.keep_decoded = o.keep_decoded;
  data::SampleSource src(
      set, data::strided_shard(static_cast<int64_t>(set.list.samples.size()), me, world), so);
  const int64_t shard = static_cast<int64_t>(src.store().size());
  TESSERA_CHECK(shard >= o.batch_size, "rank ", me, "'s shard of ", shard,
                " samples is smaller than one batch of ", o.batch_size);
  const int64_t batches = o.batches > 0 ? o.batches : shard / o.batch_size;
  const int most = *std::max_element(o.workers.begin(), o.workers.end());
  const bool talk = me == 0;

  DataBenchResult r;
  // The first pass reads this rank's shard from its files (with the most workers).
  uint64_t io0 = data::process_read_bytes();
  const torch::Device device = agreed_device(o.device, is_initialized());
  const bool pinned = device.is_cuda();
  r.first_pass_samples_per_s =
      pump(src, most, o.batch_size, shard / o.batch_size, 0, o.seed, pinned);
  src.store().load_all();
  r.first_pass_bytes = data::process_read_bytes() - io0;
  if (talk) {
    std::printf("# tessera bench data: %s '%s', rank %d of %d holds %lld samples (%.1f MiB %s)\n",
                o.format.c_str(), o.data.c_str(), me, world, static_cast<long long>(shard),
                static_cast<double>(src.store().memory_bytes()) / (1024.0 * 1024.0),
                o.keep_decoded ? "decoded" : "encoded");
    std::printf("# batch %lld, %lldx%lld, %lld batches per measurement, median of %d\n",
                static_cast<long long>(o.batch_size), static_cast<long long>(o.image_size),
                static_cast<long long>(o.image_size), static_cast<long long>(batches), o.repeats);
    std::printf("first pass (files): %.1f samples/s, %.1f MiB read\n", r.first_pass_samples_per_s,
                static_cast<double>(r.first_pass_bytes) / (1024.0 * 1024.0));
    std::fflush(stdout);
  }
  if (o.reference_model != "none") {
    at::set_num_threads(o.threads);
    r.step_samples_per_s = step_rate(o, device, set.num_classes, set.segmentation);
  }
  if (talk) {
    std::printf("%8s %14s %16s %18s\n", "workers", "samples/s", "x step", "file bytes read");
  }
  int64_t epoch = 1;
  for (int w : o.workers) {
    DataBenchRow row;
    row.workers = w;
    std::vector<double> rates;
    const uint64_t before = src.store().file_bytes_read();
    for (int k = 0; k < o.repeats; ++k)
      rates.push_back(pump(src, w, o.batch_size, batches, epoch++, o.seed, pinned));
    row.file_bytes = src.store().file_bytes_read() - before;
    row.samples_per_s = median(rates);
    row.ratio_to_step = r.step_samples_per_s > 0 ? row.samples_per_s / r.step_samples_per_s : 0;
    r.rows.push_back(row);
  }
  if (talk) report(o, r);
  return r;
}

}  // namespace train
}  // namespace tessera
