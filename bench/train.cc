#include "bench/train.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench/data.h"
#include "bench/spatial.h"
#include "common/error.h"
#include "models/registry.h"
#include "runtime/memory_policy.h"
#include "tessera/torch.h"
#include "train/device/autocast.h"
#include "train/device/memory_layout.h"
#include "train/device/mixed_precision.h"
#include "train/device/run_device.h"

namespace tessera {
namespace train {

namespace {

// Rank 0's figures, as Horovod's benchmark reports them (every rank runs the same steps, since
// each step waits for every rank's gradients): mean and 95% interval per rank and in total,
// printed and written to --json.
void summarise(const TrainBenchOptions& o, const std::vector<double>& rates, TrainBenchResult& r) {
  const bool root = rank() == 0;
  double mean = 0, var = 0;
  for (double v : rates) mean += v;
  mean /= static_cast<double>(rates.size());
  for (double v : rates) var += (v - mean) * (v - mean);
  const double sd = std::sqrt(var / static_cast<double>(rates.size()));
  r.per_rank_mean = mean;
  r.per_rank_ci = 1.96 * sd;
  r.total_mean = mean * size();
  r.total_ci = r.per_rank_ci * size();
  if (root) {
    std::printf("Img/sec per rank: %.2f +-%.2f\n", r.per_rank_mean, r.per_rank_ci);
    std::printf("Total img/sec on %d rank(s): %.2f +-%.2f\n", size(), r.total_mean, r.total_ci);
    std::printf("Minor page faults per batch (rank 0): %.0f\n", r.minor_faults_per_batch);
    if (!o.json.empty()) {
      std::ofstream f(o.json);
      TESSERA_CHECK(f.good(), "--json: cannot write '", o.json, "'");
      f << nlohmann::json{{"model", o.model},
                          {"batch_size", o.batch_size},
                          {"image_size", o.image_size},
                          {"ranks", size()},
                          {"threads", o.threads},
                          {"device", o.device},
                          {"precision", o.precision},
                          {"memory_format", o.memory_format},
                          {"engine", o.engine},
                          {"malloc_policy", runtime::kMallocPolicy.get(settings())},
                          {"per_rank", rates},
                          {"per_rank_mean", r.per_rank_mean},
                          {"total_mean", r.total_mean},
                          {"total_ci", r.total_ci},
                          {"minor_faults_per_batch", r.minor_faults_per_batch}}
               .dump(1)
        << "\n";
    }
  }
}

void validate(const TrainBenchOptions& o) {
  models::task_of(o.model);  // throws for an unknown model, listing the accepted ones
  TESSERA_CHECK(o.batch_size > 0, "--batch-size must be > 0, got ", o.batch_size);
  TESSERA_CHECK(o.image_size >= 32, "--image-size must be >= 32, got ", o.image_size);
  TESSERA_CHECK(o.iters > 0 && o.batches_per_iter > 0 && o.warmup >= 0,
                "--iters and --batches-per-iter must be > 0, --warmup >= 0");
  TESSERA_CHECK(o.threads >= 1, "--threads must be >= 1");
  TESSERA_CHECK(!parse_precision(o.precision).loss_scaled,
                "bench train --precision: f32, f64 or bf16 (f16's loss scaling is tessera "
                "train's), got ",
                o.precision);
  parse_memory_format(o.memory_format);
  TESSERA_CHECK(o.engine || size() == 1,
                "--no-engine measures one rank without the DistributedOptimizer; this run has ",
                size(), " ranks");
}

int64_t parameter_count(torch::nn::Module& m) {
  int64_t n = 0;
  for (const torch::Tensor& p : m.parameters()) n += p.numel();
  return n;
}

// The model on its device, in the run's dtype and layout, with rank 0's weights.
models::Model bench_model(const TrainBenchOptions& o, const models::ModelSpec& spec,
                          torch::Device device, torch::ScalarType dtype) {
  models::Model model = models::make_model(spec);
  model.module().train();
  model.module().to(dtype);
  broadcast_parameters(model.module(), 0);
  model.module().to(device);
  to_memory_format(model.module(), parse_memory_format(o.memory_format));
  return model;
}

// What is measured, as Horovod's benchmark prints it, and tessera's own settings.
void print_header(const TrainBenchOptions& o, int64_t parameters, const torch::Device& device) {
  std::printf(
      "Model: %s\nParameters: %lld\nBatch size: %lld\nImage size: %lld\nNumber of ranks: %d\n"
      "Threads per rank: %d\nDevice: %s\nPrecision: %s\nMemory format: %s\nEngine: %s\n"
      "Memory policy: %s\n",
      o.model.c_str(), static_cast<long long>(parameters), static_cast<long long>(o.batch_size),
      static_cast<long long>(o.image_size), size(), o.threads, device.str().c_str(),
      o.precision.c_str(), o.memory_format.c_str(),
      o.engine ? "DistributedOptimizer" : "off (plain SGD)",
      runtime::kMallocPolicy.get(settings()).c_str());
  std::printf("Running warmup...\n");
  std::fflush(stdout);
}

}  // namespace

TrainBenchResult run_train_benchmark(const TrainBenchOptions& o) {
  validate(o);
  const models::Task task = models::task_of(o.model);
  const Precision precision = parse_precision(o.precision);
  at::set_num_threads(o.threads);
  set_cudnn_benchmark(o.cudnn_benchmark);
  torch::manual_seed(0);
  models::ModelSpec spec;
  spec.name = o.model;
  spec.num_classes =
      o.num_classes > 0 ? o.num_classes : (task == models::Task::kClassification ? 1000 : 21);
  const torch::Device device = agreed_device(o.device, true);
  models::Model model = bench_model(o, spec, device, precision.master);
  torch::optim::SGD sgd(model.module().parameters(), torch::optim::SGDOptions(0.01));
  std::unique_ptr<DistributedOptimizer> opt;  // made after the model moved (its hooks)
  if (o.engine) {
    DistributedOptions d;
    d.compression = parse_compression(o.compression);
    d.groups = o.groups;
    opt = std::make_unique<DistributedOptimizer>(sgd, model.module().named_parameters(), d);
  }

  // Fixed random data, as Horovod's benchmark uses: this measures the model and the engine.
  torch::Tensor x = in_memory_format(
      torch::randn({o.batch_size, 3, o.image_size, o.image_size}).to(device, precision.master),
      parse_memory_format(o.memory_format));
  torch::Tensor y = (task == models::Task::kClassification
                         ? torch::randint(spec.num_classes, {o.batch_size}, torch::kLong)
                         : torch::randint(spec.num_classes,
                                          {o.batch_size, o.image_size, o.image_size}, torch::kLong))
                        .to(device);
  auto one_batch = [&] {
    if (opt) {
      opt->zero_grad();
    } else {
      sgd.zero_grad();
    }
    torch::Tensor out;
    {
      AutocastScope amp(device, precision.compute);
      out = model.forward(x);
    }
    torch::nn::functional::cross_entropy(out.to(precision.master), y).backward();
    if (opt) {
      opt->step();
    } else {
      sgd.step();
    }
  };
  const bool root = rank() == 0;
  if (root) print_header(o, parameter_count(model.module()), device);
  for (int i = 0; i < o.warmup; ++i) one_batch();
  synchronize_device(device);
  if (root) std::printf("Running benchmark...\n");
  std::vector<double> rates;
  const long faults0 = runtime::minor_page_faults();
  for (int it = 0; it < o.iters; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int b = 0; b < o.batches_per_iter; ++b) one_batch();
    synchronize_device(device);  // the GPU's queued work belongs to this iteration
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(o.batch_size * o.batches_per_iter) / s);
    if (root) {
      std::printf("Iter #%d: %.2f img/sec per rank\n", it, rates.back());
      std::fflush(stdout);
    }
  }
  TrainBenchResult r;
  r.minor_faults_per_batch = static_cast<double>(runtime::minor_page_faults() - faults0) /
                             static_cast<double>(o.iters * o.batches_per_iter);
  summarise(o, rates, r);
  return r;
}

TrainBenchOptions train_bench_options(const SharedBenchFlags& f) {
  TrainBenchOptions o = f.train;
  if (f.iters_given) o.iters = f.iters;
  if (f.warmup_given) o.warmup = f.warmup;
  o.json = f.json;
  o.device = f.device;  // one --device for every bench
  return o;
}

void apply_shared_flags(const SharedBenchFlags& f, DataBenchOptions* o) {
  if (f.batch_size_given) o->batch_size = f.train.batch_size;
  if (f.image_size_given) o->image_size = f.train.image_size;
  o->threads = f.train.threads;
  o->device = f.device;  // the reference step's, with these two of bench train
  o->precision = f.train.precision;
  o->memory_format = f.train.memory_format;
  o->json = f.json;
}

void apply_shared_flags(const SharedBenchFlags& f, SpatialBenchOptions* o) {
  if (f.batch_size_given) o->batch_size = f.train.batch_size;
  if (f.image_size_given) o->image_size = f.train.image_size;
  if (f.model_given) o->model = f.train.model;
  if (f.iters_given) o->iters = f.iters;
  if (f.warmup_given) o->warmup = f.warmup;
  o->threads = f.train.threads;
  o->json = f.json;
  o->device = f.device;  // one --device for every bench
}

}  // namespace train
}  // namespace tessera
