#include "bench/spatial.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/error.h"
#include "common/stats.h"
#include "models/registry.h"
#include "spatial/process_grid.h"
#include "spatial/spatial_ops.h"
#include "spatial/spatial_resnet.h"
#include "tessera/torch.h"
#include "train/device/run_device.h"

namespace tessera {
namespace train {
namespace {

// Resident set size now and its high-water mark, in GiB (/proc/self/status VmRSS, VmHWM).
std::pair<double, double> rss_gib() {
  std::ifstream f("/proc/self/status");
  std::string key;
  double now = 0, peak = 0;
  while (f >> key) {
    double kb = 0;
    if (key == "VmRSS:" && f >> kb) now = kb / (1024.0 * 1024.0);
    if (key == "VmHWM:" && f >> kb) peak = kb / (1024.0 * 1024.0);
  }
  return {now, peak};
}

double max_over_ranks(double v, const std::string& name) {
  torch::Tensor t = torch::tensor({v}, torch::kDouble);
  allreduce_(t, name, ReduceOp::kMax);
  return t.item<double>();
}

// Rank 0's lines and --json.
void report(const SpatialBenchOptions& o, const spatial::GridShape& g,
            const std::vector<double>& steps, const SpatialBenchResult& r) {
  const bool whole = g.spatial() == 1;
  std::printf(
      "spatial %dx%d grid (%d data group%s), %s, %lldx%lld image, batch %lld, %d thread%s per "
      "rank%s\n",
      g.h, g.w, g.data, g.data == 1 ? "" : "s", o.model.c_str(),
      static_cast<long long>(o.image_size), static_cast<long long>(o.image_size),
      static_cast<long long>(o.batch_size), o.threads, o.threads == 1 ? "" : "s",
      whole ? " (the ordinary model on the whole image)" : "");
  std::printf(
      "step %.3f s (median of %d, slowest rank), halo exchange %.3f s (%.1f%%), group "
      "sums %.3f s (%.1f%%)\n",
      r.step_s, o.iters, r.halo_s, 100.0 * r.halo_s / r.step_s, r.group_s,
      100.0 * r.group_s / r.step_s);
  std::printf(
      "rank 0: forward %.3f s, backward %.3f s, optimizer step (waiting for the "
      "gradients' allreduce) %.3f s\n",
      r.forward_s, r.backward_s, r.update_s);
  std::printf(
      "peak resident memory per rank %.2f GiB (largest rank; %.2f GiB before the first "
      "step)\n",
      r.peak_rss_gib, r.start_rss_gib);
  if (o.device != "cpu") {
    std::printf("peak device memory per rank %.3f GiB (largest rank)\n", r.peak_device_gib);
  }
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    TESSERA_CHECK(f.good(), "--json: cannot write '", o.json, "'");
    f << nlohmann::json{{"grid", o.grid},
                        {"ranks", g.world()},
                        {"model", o.model},
                        {"image_size", o.image_size},
                        {"batch_size", o.batch_size},
                        {"threads", o.threads},
                        {"step_s", r.step_s},
                        {"steps_s", steps},
                        {"halo_s", r.halo_s},
                        {"group_s", r.group_s},
                        {"forward_s", r.forward_s},
                        {"backward_s", r.backward_s},
                        {"update_s", r.update_s},
                        {"peak_rss_gib", r.peak_rss_gib},
                        {"device", o.device},
                        {"peak_device_gib", r.peak_device_gib},
                        {"start_rss_gib", r.start_rss_gib}}
             .dump(1)
      << "\n";
  }
}

}  // namespace

SpatialBenchResult run_spatial_benchmark(const SpatialBenchOptions& o) {
  TESSERA_CHECK(models::task_of(o.model) == models::Task::kClassification,
                "bench spatial measures ResNet classifiers (resnet18, resnet50), got ", o.model);
  TESSERA_CHECK(o.iters >= 1 && o.warmup >= 0 && o.batch_size >= 1 && o.threads >= 1,
                "bench spatial: --iters, --batch-size and --threads must be >= 1, --warmup >= 0");
  at::set_num_threads(o.threads);
  torch::manual_seed(1);
  spatial::ProcessGrid grid(o.grid);
  const spatial::GridShape g = grid.shape();
  const bool whole = g.spatial() == 1;
  models::ModelSpec spec;
  spec.name = o.model;
  spec.num_classes = 2;
  models::Model model = models::make_model(spec);
  auto& net = *model.module().as<models::ResNetImpl>();
  net.train();
  if (!whole) spatial::check_resnet_tiling(net, o.image_size, g.h, g.w);
  broadcast_parameters(net, 0);
  const torch::Device device = agreed_device(o.device, true);
  net.to(device);  // before the DistributedOptimizer hooks the parameters
  torch::optim::SGD sgd(net.parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  DistributedOptimizer dopt(sgd, net.named_parameters());
  // Pixel values do not change the cost; each rank makes its own tile.
  const torch::Tensor tile =
      torch::randn({o.batch_size, 3, o.image_size / g.h, o.image_size / g.w}).to(device);
  const torch::Tensor labels = torch::zeros({o.batch_size}, torch::kLong).to(device);
  const double start_rss = rss_gib().first;

  std::vector<double> steps, halos, groups, forwards, backwards, updates;
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    const double h0 = spatial::halo_exchange_seconds(), g0 = spatial::group_sum_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    sgd.zero_grad();
    const torch::Tensor logits =
        whole ? model.forward(tile) : spatial::spatial_resnet_forward(net, tile, grid.space());
    const torch::Tensor loss = torch::nn::functional::cross_entropy(logits, labels);
    const auto t1 = std::chrono::steady_clock::now();
    loss.backward();
    const auto t2 = std::chrono::steady_clock::now();
    dopt.step();
    synchronize_device(device);  // the GPU's queued work belongs to the step
    const auto t3 = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(t3 - t0).count();
    if (i < o.warmup) continue;
    forwards.push_back(std::chrono::duration<double>(t1 - t0).count());
    backwards.push_back(std::chrono::duration<double>(t2 - t1).count());
    updates.push_back(std::chrono::duration<double>(t3 - t2).count());
    steps.push_back(max_over_ranks(s, "bench.spatial.step"));
    halos.push_back(spatial::halo_exchange_seconds() - h0);
    groups.push_back(spatial::group_sum_seconds() - g0);
  }
  SpatialBenchResult r;
  r.step_s = median(steps);
  r.halo_s = median(halos);
  r.group_s = median(groups);
  r.forward_s = median(forwards);
  r.backward_s = median(backwards);
  r.update_s = median(updates);
  r.peak_rss_gib = max_over_ranks(rss_gib().second, "bench.spatial.peak");
  r.start_rss_gib = max_over_ranks(start_rss, "bench.spatial.start");
  r.peak_device_gib = max_over_ranks(peak_device_memory_gib(device), "bench.spatial.device");
  if (rank() == 0) report(o, g, steps, r);
  return r;
}

}  // namespace train
}  // namespace tessera
