#include "apps/tessera/simulate_cli.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/engine.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/settings.h"
#include "models/registry.h"
#include "tune/cost_model.h"
#include "tune/machine.h"
#include "tune/scaling_plot.h"
#include "tune/search_space.h"
#include "tune/simulator.h"
#include "tune/timeline_workload.h"

namespace tessera {
namespace app {
namespace {

// The engine settings of the flags: the simulated engine runs these.
engine::Tunables tunables_of(const SimulateOptions& o) {
  TESSERA_CHECK(o.cycle_time_ms >= 0, "--cycle-time must be >= 0 ms, got ", o.cycle_time_ms);
  engine::Tunables t;
  t.fusion_threshold = parse_bytes(o.fusion_threshold);
  t.cycle_time_ms = o.cycle_time_ms;
  return tune::with_algorithm(t, comm::parse_algorithm(o.algorithm));
}

using comm::Algorithm;

std::vector<int> parse_gpus(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    char* end = nullptr;
    const long v = std::strtol(part.c_str(), &end, 10);
    TESSERA_CHECK(!part.empty() && *end == '\0' && v >= 1 && v <= (1L << 30), "--gpus: '", part,
                  "' is not a GPU count; accepted: integers >= 1 separated by commas");
    out.push_back(static_cast<int>(v));
  }
  TESSERA_CHECK(!out.empty(), "--gpus: no GPU count given");
  return out;
}

struct ModelDefaults {
  std::string registry_name;
  double batch, images_per_s;
};

// Per-GPU rates of the papers' V100 runs: ResNet-50 at ~300 img/s (Romero et al.), DeepLab-v3+ at
// 6.7 img/s (Anthony et al.); the ResNet-18 and DeepLab on ResNet-18 rates scale those by FLOPs.
ModelDefaults defaults_for(const std::string& model) {
  if (model == "resnet50") return {"resnet50", 32, 300};
  if (model == "resnet18") return {"resnet18", 32, 750};
  if (model == "deeplabv3plus" || model == "deeplabv3plus_resnet50") {
    return {"deeplabv3plus_resnet50", 2, 6.7};
  }
  if (model == "deeplabv3plus_resnet18") return {"deeplabv3plus_resnet18", 2, 13.4};
  throw InvalidArgument("--model '" + model +
                        "' is not known to the simulator; accepted: resnet50, resnet18, "
                        "deeplabv3plus (= deeplabv3plus_resnet50), deeplabv3plus_resnet18");
}

// The model's gradients in the order backward produces them (parameters in reverse).
std::vector<double> gradient_bytes(const std::string& registry_name) {
  models::ModelSpec spec;
  spec.name = registry_name;
  spec.num_classes = models::task_of(registry_name) == models::Task::kClassification ? 1000 : 21;
  models::Model model = models::make_model(spec);
  std::vector<double> bytes;
  for (const auto& p : model.module().parameters()) {
    bytes.push_back(static_cast<double>(p.numel()) * 4.0);
  }
  std::reverse(bytes.begin(), bytes.end());
  return bytes;
}

tune::Machine machine_of(const SimulateOptions& o) {
  if (!o.machine_file.empty()) {
    const std::vector<char> b = read_file(o.machine_file);
    tune::Machine m = tune::machine_from_json(std::string(b.begin(), b.end()));
    if (o.jitter >= 0) m.compute_jitter = o.jitter;
    tune::validate(m);
    return m;
  }
  tune::Machine m = tune::machine_preset(o.preset, o.cost_table);
  if (o.jitter >= 0) m.compute_jitter = o.jitter;
  tune::validate(m);
  return m;
}

nlohmann::json machine_json(const tune::Machine& m) {
  return {{"name", m.name},
          {"nodes", m.nodes},
          {"ranks_per_node", m.ranks_per_node},
          {"intra", {{"latency_us", m.intra.latency_us}, {"gbps", m.intra.gbps}}},
          {"shm", {{"latency_us", m.shm.latency_us}, {"gbps", m.shm.gbps}}},
          {"inter", {{"latency_us", m.inter.latency_us}, {"gbps", m.inter.gbps}}},
          {"rails", m.rails},
          {"reduce_gbps", m.reduce_gbps},
          {"cores_per_node", m.cores_per_node},
          {"coordinator_us_per_request", m.coordinator_us_per_request},
          {"compute_jitter", m.compute_jitter}};
}

void write_text(const std::string& path, const std::string& text) {
  write_file_atomically(path, text.data(), text.size());
}

int run_validation(const SimulateOptions& o, const tune::Machine& m, const std::vector<int>& gpus) {
  nlohmann::json out = {{"machine", machine_json(m)}};
  if (!o.allreduce_sizes.empty()) {
    std::vector<double> sizes;
    std::stringstream ss(o.allreduce_sizes);
    std::string part;
    while (std::getline(ss, part, ',')) sizes.push_back(static_cast<double>(parse_bytes(part)));
    std::printf("# predicted allreduce time (us), auto, on %s\n%12s", m.name.c_str(), "bytes");
    for (int g : gpus) std::printf("  %8d ranks", g);
    std::printf("\n");
    for (double b : sizes) {
      std::printf("%12.0f", b);
      nlohmann::json row = {{"bytes", b}};
      for (int g : gpus) {
        const double us = tune::allreduce_seconds(m, Algorithm::kAuto, g, b) * 1e6;
        std::printf("  %8.1f %-5s", us, comm::algorithm_name(tune::best_algorithm(m, g, b)));
        row[std::to_string(g)] = us;
      }
      std::printf("\n");
      out["allreduce_us"].push_back(row);
    }
  }
  if (o.engine_bench) {
    // `tessera bench engine`: ResNet-50's 161 gradients enqueued at once, no compute.
    tune::Workload w;
    w.name = "bench engine (ResNet-50 gradients)";
    w.images_per_step = 1;
    const auto shapes = bench::resnet50_parameter_shapes();
    for (size_t i = shapes.size(); i-- > 0;) {
      double e = 1;
      for (int64_t d : shapes[i]) e *= static_cast<double>(d);
      w.gradients.push_back({"g" + std::to_string(i), 4 * e, 0.0});
    }
    engine::Tunables s = tunables_of(o);
    std::printf("# predicted `tessera bench engine` step (ms): cache on / off\n");
    for (int g : gpus) {
      s.cache_enabled = true;
      const tune::StepResult on = tune::simulate_step(m, w, g, s);
      s.cache_enabled = false;
      const tune::StepResult off = tune::simulate_step(m, w, g, s);
      std::printf("  %4d ranks  step %9.2f ms (cache off %9.2f)  control %.3f / %.3f ms\n", g,
                  on.step_s * 1e3, off.step_s * 1e3, on.control_s * 1e3, off.control_s * 1e3);
      out["engine"].push_back({{"gpus", g},
                               {"step_ms", on.step_s * 1e3},
                               {"step_ms_no_cache", off.step_s * 1e3},
                               {"control_ms", on.control_s * 1e3},
                               {"control_ms_no_cache", off.control_s * 1e3}});
    }
  }
  if (!o.json.empty()) write_text(o.json, out.dump(1) + "\n");
  return 0;
}

}  // namespace

CLI::App* add_simulate_command(CLI::App& app, SimulateOptions& o) {
  CLI::App* c = app.add_subcommand(
      "simulate", "predict step time, throughput and scaling efficiency on N GPUs of a machine");
  c->add_option("--preset", o.preset, "machine: summit or local")->capture_default_str();
  c->add_option("--machine", o.machine_file, "machine description (JSON) instead of --preset");
  c->add_option("--cost-table", o.cost_table,
                "--preset local: the table of `tessera bench allreduce --calibrate`");
  c->add_option("--model", o.model, "resnet50, resnet18, deeplabv3plus, deeplabv3plus_resnet18")
      ->capture_default_str();
  c->add_option("--timeline", o.timeline,
                "workload from this TESSERA_TIMELINE of `tessera train` (compute time, each "
                "gradient's size and ready time) instead of --model; give --batch-size");
  c->add_option("--gpus", o.gpus, "GPU counts, comma-separated")->capture_default_str();
  c->add_option("--batch-size", o.batch_size, "images per GPU per step (0: the model's default)");
  c->add_option("--img-per-s", o.images_per_s,
                "one GPU's training rate without communication (0: the model's default)");
  c->add_option("--fusion-threshold", o.fusion_threshold, "bytes (K/M/G)")->capture_default_str();
  c->add_option("--cycle-time", o.cycle_time_ms, "ms")->capture_default_str();
  c->add_option("--algorithm", o.algorithm, "auto ring rhd dbtree multicolor hierarchical")
      ->capture_default_str();
  c->add_option("--jitter", o.jitter,
                "relative spread of one GPU's compute time (overrides the machine's)")
      ->check(CLI::Range(0.0, 1.0));
  c->add_option("--json", o.json, "also write the figures here");
  c->add_option("--svg", o.svg, "plot efficiency against GPU count here");
  c->add_option("--allreduce-sizes", o.allreduce_sizes,
                "validation: print predicted allreduce times at these byte sizes");
  c->add_flag("--engine-bench", o.engine_bench,
              "validation: print the predicted `tessera bench engine` step");
  return c;
}

namespace {

// The workload to simulate: a recorded timeline's last step, or a model's parameter list at its
// papers' per-GPU rate; `what` says where the gradients' ready times come from.
struct SimWorkload {
  tune::Workload w;
  std::vector<double> bytes;
  double batch = 0, rate = 0, total = 0;
  std::string what;
};

SimWorkload workload_of(const SimulateOptions& o) {
  TESSERA_CHECK(o.batch_size >= 0 && o.images_per_s >= 0,
                "--batch-size and --img-per-s must be >= 0 (0: the model's default)");
  SimWorkload sw;
  if (!o.timeline.empty()) {
    TESSERA_CHECK(o.batch_size > 0,
                  "--timeline needs --batch-size: the recorded run's images per "
                  "rank per step");
    const std::vector<char> text = read_file(o.timeline);
    sw.w = tune::workload_from_timeline(std::string(text.begin(), text.end()), o.timeline,
                                        o.batch_size);
    for (const tune::Gradient& g : sw.w.gradients) sw.bytes.push_back(g.bytes);
    sw.batch = o.batch_size;
    sw.rate = sw.batch / sw.w.compute_s;
    sw.what = "the timeline's last complete step, gradients ready as recorded";
  } else {
    const ModelDefaults d = defaults_for(o.model);
    sw.batch = o.batch_size > 0 ? o.batch_size : d.batch;
    sw.rate = o.images_per_s > 0 ? o.images_per_s : d.images_per_s;
    sw.bytes = gradient_bytes(d.registry_name);
    sw.w = tune::workload_from_sizes(d.registry_name, sw.bytes, sw.batch / sw.rate, sw.batch);
    sw.what = "ready evenly over backward (2/3 of compute)";
  }
  for (double b : sw.bytes) sw.total += b;
  return sw;
}

nlohmann::json print_setup(const SimulateOptions& o, const tune::Machine& m, const SimWorkload& sw,
                           const engine::Tunables& s) {
  std::printf(
      "# machine %s: %d nodes x %d GPUs; intra %.1f us %.1f GB/s, inter %.1f us %.1f GB/s per "
      "node (%d rails); reduce %.0f GB/s; coordinator %.2f us per request; jitter %.3f\n",
      m.name.c_str(), m.nodes, m.ranks_per_node, m.intra.latency_us, m.intra.gbps,
      m.inter.latency_us, m.inter.gbps, m.rails, m.reduce_gbps, m.coordinator_us_per_request,
      m.compute_jitter);
  std::printf(
      "# workload %s: %.0f img per GPU at %.1f img/s = %.1f ms compute; %zu gradients, %.1f MB; "
      "%s\n",
      sw.w.name.c_str(), sw.batch, sw.rate, sw.w.compute_s * 1e3, sw.bytes.size(), sw.total / 1e6,
      sw.what.c_str());
  std::printf("# engine: %s, fusion %s, cycle %.2f ms\n", o.algorithm.c_str(),
              o.fusion_threshold.c_str(), o.cycle_time_ms);
  return {{"machine", machine_json(m)},
          {"workload",
           {{"model", sw.w.name},
            {"batch_per_gpu", sw.batch},
            {"images_per_s_per_gpu", sw.rate},
            {"compute_s", sw.w.compute_s},
            {"gradients", sw.bytes.size()},
            {"bytes", sw.total}}},
          {"settings",
           {{"algorithm", o.algorithm},
            {"fusion_threshold", s.fusion_threshold},
            {"cycle_time_ms", s.cycle_time_ms}}}};
}

nlohmann::json point_json(int g, const tune::StepResult& r, const tune::StepResult& r_off,
                          const nlohmann::json& by_algo) {
  return {{"gpus", g},
          {"efficiency", r.efficiency},
          {"step_s", r.step_s},
          {"throughput", r.throughput},
          {"exposed_s", r.exposed_s},
          {"control_s", r.control_s},
          {"cycles", r.cycles},
          {"buffers", r.buffers},
          {"algorithm", comm::algorithm_name(r.largest_algorithm)},
          {"efficiency_no_cache", r_off.efficiency},
          {"control_s_no_cache", r_off.control_s},
          {"speedup_from_cache", r_off.step_s / r.step_s},
          {"efficiency_by_algorithm", by_algo}};
}

// One row per GPU count: the settings with the cache on and off, and each algorithm forced.
std::vector<tune::Series> scaling_table(const SimulateOptions& o, const tune::Machine& m,
                                        const tune::Workload& w, const std::vector<int>& gpus,
                                        const engine::Tunables& s, nlohmann::json* out) {
  std::printf("%7s %6s %9s %10s %9s %9s %9s %9s %8s |", "gpus", "eff", "step_ms", "img/s",
              "exposed", "ctl_ms", "ctl_off", "eff_off", "algo");
  for (Algorithm a : tune::modelled_algorithms()) std::printf(" %7.7s", comm::algorithm_name(a));
  std::printf("\n");
  std::vector<tune::Series> series = {{o.algorithm + " (cache on)", {}},
                                      {o.algorithm + " (cache off)", {}}};
  for (Algorithm a : tune::modelled_algorithms()) series.push_back({comm::algorithm_name(a), {}});
  for (int g : gpus) {
    engine::Tunables off = s;
    off.cache_enabled = false;
    const tune::StepResult r = tune::simulate_step(m, w, g, s);
    const tune::StepResult r_off = tune::simulate_step(m, w, g, off);
    std::printf("%7d %6.3f %9.2f %10.1f %9.2f %9.3f %9.3f %9.3f %8s |", g, r.efficiency,
                r.step_s * 1e3, r.throughput, r.exposed_s * 1e3, r.control_s * 1e3,
                r_off.control_s * 1e3, r_off.efficiency, comm::algorithm_name(r.largest_algorithm));
    nlohmann::json by_algo;
    series[0].points.emplace_back(g, r.efficiency);
    series[1].points.emplace_back(g, r_off.efficiency);
    size_t k = 2;
    for (Algorithm a : tune::modelled_algorithms()) {
      const tune::StepResult ra = tune::simulate_step(m, w, g, tune::with_algorithm(s, a));
      std::printf(" %7.3f", ra.efficiency);
      by_algo[comm::algorithm_name(a)] = ra.efficiency;
      series[k++].points.emplace_back(g, ra.efficiency);
    }
    std::printf("\n");
    (*out)["points"].push_back(point_json(g, r, r_off, by_algo));
  }
  return series;
}

// The knobs at the largest count: what fusion and cycle time buy there.
void knob_sweeps(const SimulateOptions& o, const tune::Machine& m, const tune::Workload& w, int g,
                 const engine::Tunables& s, nlohmann::json* out) {
  std::printf("# at %d GPUs: efficiency by fusion threshold (cycle %.2f ms)\n", g, s.cycle_time_ms);
  for (double f : {0.0, 1.0 * (1 << 20), 8.0 * (1 << 20), 32.0 * (1 << 20), 64.0 * (1 << 20),
                   128.0 * (1 << 20)}) {
    engine::Tunables sf = s;
    sf.fusion_threshold = static_cast<size_t>(f);
    const tune::StepResult r = tune::simulate_step(m, w, g, sf);
    std::printf("    fusion %6.0f MiB: eff %.3f  step %.2f ms  %d buffers\n", f / (1 << 20),
                r.efficiency, r.step_s * 1e3, r.buffers);
    (*out)["fusion_sweep"].push_back(
        {{"fusion_threshold", f}, {"efficiency", r.efficiency}, {"step_s", r.step_s}});
  }
  std::printf("# at %d GPUs: efficiency by cycle time (fusion %s)\n", g,
              o.fusion_threshold.c_str());
  for (double c : {0.0, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0}) {
    engine::Tunables sc = s;
    sc.cycle_time_ms = c;
    const tune::StepResult r = tune::simulate_step(m, w, g, sc);
    std::printf("    cycle %5.1f ms: eff %.3f  step %.2f ms  %d cycles\n", c, r.efficiency,
                r.step_s * 1e3, r.cycles);
    (*out)["cycle_sweep"].push_back(
        {{"cycle_time_ms", c}, {"efficiency", r.efficiency}, {"step_s", r.step_s}});
  }
}

}  // namespace

int run_simulate(const SimulateOptions& o) {
  const tune::Machine m = machine_of(o);
  const std::vector<int> gpus = parse_gpus(o.gpus);
  for (int g : gpus) {
    TESSERA_CHECK(static_cast<long long>(g) <= static_cast<long long>(m.nodes) * m.ranks_per_node,
                  "--gpus ", g, " exceeds machine '", m.name, "' (", m.nodes, " nodes x ",
                  m.ranks_per_node, " GPUs)");
  }
  if (!o.allreduce_sizes.empty() || o.engine_bench) return run_validation(o, m, gpus);
  const SimWorkload sw = workload_of(o);
  const engine::Tunables s = tunables_of(o);
  nlohmann::json out = print_setup(o, m, sw, s);
  const std::vector<tune::Series> series = scaling_table(o, m, sw.w, gpus, s, &out);
  knob_sweeps(o, m, sw.w, gpus.back(), s, &out);
  if (!o.json.empty()) write_text(o.json, out.dump(1) + "\n");
  if (!o.svg.empty()) {
    write_text(o.svg,
               tune::efficiency_plot_svg(sw.w.name + " on " + m.name + " (weak scaling)", series));
  }
  return 0;
}

}  // namespace app
}  // namespace tessera
