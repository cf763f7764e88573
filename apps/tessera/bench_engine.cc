#include "apps/tessera/bench_engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "comm/collectives.h"
#include "comm/communicator.h"
#include "common/error.h"
#include "engine/engine.h"

namespace tessera {
namespace app {
namespace {

using Clock = std::chrono::steady_clock;

double max_over_ranks(comm::Communicator& world, double v) {
  comm::AllreduceOptions o;
  o.op = ReduceOp::kMax;
  o.algorithm = comm::Algorithm::kMpi;
  comm::allreduce(world, &v, &v, 1, DataType::kFloat64, o);
  return v;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

std::vector<std::vector<int64_t>> resnet50_parameter_shapes() {
  std::vector<std::vector<int64_t>> s;
  auto conv_bn = [&](int64_t out, int64_t in, int64_t k) {
    s.push_back({out, in, k, k});
    s.push_back({out});  // bn weight
    s.push_back({out});  // bn bias
  };
  conv_bn(64, 3, 7);
  int64_t in = 64;
  const int blocks[4] = {3, 4, 6, 3};
  for (int layer = 0; layer < 4; ++layer) {
    const int64_t w = int64_t{64} << layer;
    for (int b = 0; b < blocks[layer]; ++b) {
      conv_bn(w, in, 1);
      conv_bn(w, w, 3);
      conv_bn(4 * w, w, 1);
      if (b == 0) conv_bn(4 * w, in, 1);  // downsample
      in = 4 * w;
    }
  }
  s.push_back({1000, 2048});
  s.push_back({1000});
  return s;
}

int run_engine_bench(const EngineBenchOptions& o) {
  auto world = comm::Communicator::world();
  const int n = world->size();
  const auto shapes = resnet50_parameter_shapes();
  std::vector<std::vector<float>> grads, outs;
  size_t total = 0;
  for (const auto& shape : shapes) {
    size_t e = 1;
    for (int64_t d : shape) e *= static_cast<size_t>(d);
    grads.emplace_back(e, 1.0f);
    outs.emplace_back(e, 0.0f);
    total += e;
  }
  nlohmann::json report;
  report["ranks"] = n;
  report["tensors"] = shapes.size();
  report["bytes_per_step"] = total * 4;
  if (world->rank() == 0) {
    std::printf(
        "# tessera bench engine: %d ranks, ResNet-50 gradients: %zu tensors, %zu "
        "parameters, %.1f MB per step; %d steps after %d warm-up, medians\n",
        n, shapes.size(), total, total * 4 / 1e6, o.steps, o.warmup);
    std::printf(
        "# control plane: engine time per step outside data movement (negotiation, and "
        "waiting in it for the other ranks)\n");
  }
  // Reference: one MPI_Allreduce over the same bytes.
  {
    std::vector<float> flat(total, 1.0f), out(total);
    comm::AllreduceOptions mpi;
    mpi.algorithm = comm::Algorithm::kMpi;
    std::vector<double> t;
    for (int i = 0; i < o.warmup + o.steps; ++i) {
      comm::barrier(*world);
      const auto t0 = Clock::now();
      comm::allreduce(*world, flat.data(), out.data(), total, DataType::kFloat32, mpi);
      if (i >= o.warmup)
        t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    report["mpi_allreduce_ms"] = max_over_ranks(*world, median(t));
  }
  for (const bool cache_on : {true, false}) {
    engine::EngineOptions eo = engine::EngineOptions::from_knobs();
    eo.cache_capacity = cache_on ? 1024 : 0;
    engine::Engine engine(*world, eo);
    std::vector<double> step_ms, control_ms, control_cpu_ms, cycles, rounds;
    for (int i = 0; i < o.warmup + o.steps; ++i) {
      comm::barrier(*world);
      const engine::Engine::Stats before = engine.stats();
      const auto t0 = Clock::now();
      std::vector<engine::Handle> handles;
      // Backward produces gradients from the last layer to the first.
      for (size_t k = shapes.size(); k-- > 0;) {
        handles.push_back(engine.enqueue_allreduce("grad." + std::to_string(k), grads[k].data(),
                                                   outs[k].data(), DataType::kFloat32, shapes[k]));
      }
      for (auto& h : handles) h.wait();
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      const engine::Engine::Stats after = engine.stats();
      if (i >= o.warmup) {
        step_ms.push_back(ms);
        control_ms.push_back((after.control_seconds - before.control_seconds) * 1e3);
        control_cpu_ms.push_back((after.control_cpu_seconds - before.control_cpu_seconds) * 1e3);
        cycles.push_back(static_cast<double>(after.cycles - before.cycles));
        rounds.push_back(static_cast<double>(after.coordinator_rounds - before.coordinator_rounds));
      }
    }
    const std::string key = cache_on ? "cache_on" : "cache_off";
    report[key]["step_ms"] = max_over_ranks(*world, median(step_ms));
    report[key]["control_ms_per_step"] = max_over_ranks(*world, median(control_ms));
    report[key]["control_cpu_ms_per_step"] = max_over_ranks(*world, median(control_cpu_ms));
    report[key]["cycles_per_step"] = median(cycles);
    report[key]["coordinator_rounds_per_step"] = median(rounds);
    for (const auto& out : outs) {
      TESSERA_CHECK(out.front() == static_cast<float>(1.0) && out.back() == 1.0f,
                    "engine bench: wrong average");
    }
  }
  // Latency of one 4 KiB allreduce through the engine, at the configured cycle time and at 0.
  for (const double cycle : {engine::EngineOptions::from_knobs().cycle_time_ms, 0.0}) {
    engine::EngineOptions eo = engine::EngineOptions::from_knobs();
    eo.cycle_time_ms = cycle;
    engine::Engine engine(*world, eo);
    std::vector<float> x(1024, 1.0f), y(1024);
    std::vector<double> us;
    for (int i = 0; i < o.latency_iterations; ++i) {
      comm::barrier(*world);
      const auto t0 = Clock::now();
      engine.enqueue_allreduce("latency", x.data(), y.data(), DataType::kFloat32, {1024}).wait();
      if (i >= 10)
        us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    report["latency_4KiB_us"][cycle == 0 ? "cycle_0ms" : "cycle_default"] =
        max_over_ranks(*world, median(us));
    report["latency_4KiB_us"]["cycle_default_ms"] =
        engine::EngineOptions::from_knobs().cycle_time_ms;
  }
  if (world->rank() == 0) {
    const double mpi = report["mpi_allreduce_ms"];
    for (const char* key : {"cache_on", "cache_off"}) {
      const double step = report[key]["step_ms"], control = report[key]["control_ms_per_step"];
      const double cpu = report[key]["control_cpu_ms_per_step"];
      std::printf(
          "  %-9s step %9.3f ms (%.2fx one MPI_Allreduce of %.3f ms)  control plane "
          "%8.3f ms per step, of it CPU %.3f ms; %.0f cycles, %.0f coordinator rounds per step\n",
          key, step, step / mpi, mpi, control, cpu, report[key]["cycles_per_step"].get<double>(),
          report[key]["coordinator_rounds_per_step"].get<double>());
    }
    const double on = report["cache_on"]["control_ms_per_step"];
    const double off = report["cache_off"]["control_ms_per_step"];
    const double cpu_on = report["cache_on"]["control_cpu_ms_per_step"];
    const double cpu_off = report["cache_off"]["control_cpu_ms_per_step"];
    std::printf("  control plane with the cache off / on: %.2fx wall, %.2fx CPU\n", off / on,
                cpu_off / cpu_on);
    std::printf(
        "  4 KiB allreduce through the engine: %.1f us (cycle %.1f ms), %.1f us (cycle 0)\n",
        report["latency_4KiB_us"]["cycle_default"].get<double>(),
        report["latency_4KiB_us"]["cycle_default_ms"].get<double>(),
        report["latency_4KiB_us"]["cycle_0ms"].get<double>());
    if (!o.json_path.empty()) std::ofstream(o.json_path) << report.dump(1) << "\n";
  }
  return 0;
}

}  // namespace app
}  // namespace tessera
