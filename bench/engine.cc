#include "bench/engine.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "comm/collectives.h"
#include "comm/communicator.h"
#include "common/error.h"
#include "common/stats.h"
#include "engine/engine.h"

namespace tessera {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;

double max_over_ranks(comm::Communicator& world, double v) {
  comm::AllreduceOptions o;
  o.op = ReduceOp::kMax;
  o.algorithm = comm::Algorithm::kMpi;
  comm::allreduce(world, &v, &v, 1, DataType::kFloat64, o);
  return v;
}

// True when every rank runs on this host, so the steady clocks of all ranks are one clock.
bool one_host(comm::Communicator& world) {
  char name[64] = {};
  gethostname(name, sizeof(name) - 1);
  std::vector<char> all(sizeof(name) * static_cast<size_t>(world.size()));
  comm::allgather(world, name, all.data(), sizeof(name), DataType::kUInt8);
  for (int r = 0; r < world.size(); ++r) {
    if (std::memcmp(all.data() + sizeof(name) * static_cast<size_t>(r), name, sizeof(name)) != 0)
      return false;
  }
  return true;
}

// Negotiation on the critical path, per step (needs one clock: one host). For each cycle of a
// step it counts from the moment the last rank began the cycle, so a rank that arrives late
// (still copying out the previous batch, or descheduled) is arrival skew, not negotiation:
//   agreed:  until the first rank holds the agreed list and may start moving data;
//   all:     until the last rank holds it. On cores shared by more ranks than cores, the gap
//            between the two is a rank starved by the others' data movement after agreement.
// `steps` holds each step's [first, last) cycle index on this rank. Collective over `world`.
struct CriticalPath {
  std::vector<double> agreed_ms, all_ms;
};
CriticalPath critical_path(comm::Communicator& world,
                           const std::vector<engine::Engine::CycleTime>& log,
                           const std::vector<std::pair<uint64_t, uint64_t>>& steps) {
  const size_t n = static_cast<size_t>(world.size());
  // Every rank's log, as (index, start, end) triples of doubles (exact below 2^53 cycles).
  std::vector<double> mine;
  for (const auto& c : log) {
    mine.insert(mine.end(), {static_cast<double>(c.index), c.start_s, c.negotiated_s});
  }
  int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(n);
  comm::allgather(world, &len, lens.data(), 1, DataType::kInt64);
  std::vector<size_t> counts(lens.begin(), lens.end());
  size_t total = 0;
  for (size_t c : counts) total += c;
  std::vector<double> all(total);
  comm::allgatherv(world, mine.data(), all.data(), counts, DataType::kFloat64);
  struct Cycle {
    double last_start = 0, first_end = std::numeric_limits<double>::max(), last_end = 0;
    size_t ranks = 0;
  };
  std::map<uint64_t, Cycle> by_index;
  for (size_t i = 0; i + 2 < all.size(); i += 3) {
    Cycle& c = by_index[static_cast<uint64_t>(all[i])];
    c.last_start = std::max(c.last_start, all[i + 1]);
    c.first_end = std::min(c.first_end, all[i + 2]);
    c.last_end = std::max(c.last_end, all[i + 2]);
    ++c.ranks;
  }
  // A step spans the union of its ranks' cycle ranges.
  std::vector<int64_t> lo, hi;
  for (const auto& s : steps) {
    lo.push_back(static_cast<int64_t>(s.first));
    hi.push_back(static_cast<int64_t>(s.second));
  }
  comm::AllreduceOptions mn, mx;
  mn.op = ReduceOp::kMin;
  mx.op = ReduceOp::kMax;
  comm::allreduce(world, lo.data(), lo.data(), lo.size(), DataType::kInt64, mn);
  comm::allreduce(world, hi.data(), hi.data(), hi.size(), DataType::kInt64, mx);
  CriticalPath cp;
  for (size_t k = 0; k < steps.size(); ++k) {
    double agreed = 0, everyone = 0;
    for (int64_t i = lo[k]; i < hi[k]; ++i) {
      auto it = by_index.find(static_cast<uint64_t>(i));
      TESSERA_CHECK(it != by_index.end() && it->second.ranks == n, "engine bench: cycle ", i,
                    " is missing from some rank's cycle log (more than ",
                    engine::Engine::kCycleLogSize, " cycles in one mode?)");
      agreed += std::max(0.0, it->second.first_end - it->second.last_start);
      everyone += std::max(0.0, it->second.last_end - it->second.last_start);
    }
    cp.agreed_ms.push_back(agreed * 1e3);
    cp.all_ms.push_back(everyone * 1e3);
  }
  return cp;
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

namespace {

// ResNet-50's gradients (ones) and their outputs.
struct Gradients {
  std::vector<std::vector<int64_t>> shapes = resnet50_parameter_shapes();
  std::vector<std::vector<float>> grads, outs;
  size_t total = 0;
  Gradients() {
    for (const auto& shape : shapes) {
      size_t e = 1;
      for (int64_t d : shape) e *= static_cast<size_t>(d);
      grads.emplace_back(e, 1.0f);
      outs.emplace_back(e, 0.0f);
      total += e;
    }
  }
};

// Reference: one MPI_Allreduce over the same bytes (ms, median, the slowest rank's).
double mpi_allreduce_ms(comm::Communicator& world, const EngineBenchOptions& o, size_t total) {
  std::vector<float> flat(total, 1.0f), out(total);
  comm::AllreduceOptions mpi;
  mpi.algorithm = comm::Algorithm::kMpi;
  std::vector<double> t;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    comm::barrier(world);
    const auto t0 = Clock::now();
    comm::allreduce(world, flat.data(), out.data(), total, DataType::kFloat32, mpi);
    if (i >= o.warmup)
      t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return max_over_ranks(world, median(t));
}

// Steps of every gradient through an engine with the cache on or off: the report's entry.
nlohmann::json engine_steps(comm::Communicator& world, const EngineBenchOptions& o, Gradients& g,
                            bool cache_on, bool same_clock) {
  engine::EngineOptions eo = o.engine;
  eo.tunables.cache_enabled = cache_on;
  engine::Engine engine(world, eo);
  std::vector<double> step_ms, control_ms, control_cpu_ms, cycles, rounds;
  std::vector<std::pair<uint64_t, uint64_t>> step_cycles;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    comm::barrier(world);
    const engine::Engine::Stats before = engine.stats();
    const auto t0 = Clock::now();
    std::vector<engine::Handle> handles;
    // Backward produces gradients from the last layer to the first.
    for (size_t k = g.shapes.size(); k-- > 0;) {
      handles.push_back(engine.enqueue_allreduce("grad." + std::to_string(k), g.grads[k].data(),
                                                 g.outs[k].data(), DataType::kFloat32,
                                                 g.shapes[k]));
    }
    for (auto& h : handles) h.wait();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const engine::Engine::Stats after = engine.stats();
    if (i < o.warmup) continue;
    step_ms.push_back(ms);
    control_ms.push_back((after.control_seconds - before.control_seconds) * 1e3);
    control_cpu_ms.push_back((after.control_cpu_seconds - before.control_cpu_seconds) * 1e3);
    cycles.push_back(static_cast<double>(after.cycles - before.cycles));
    rounds.push_back(static_cast<double>(after.coordinator_rounds - before.coordinator_rounds));
    step_cycles.emplace_back(before.cycles, after.cycles);
  }
  nlohmann::json r;
  if (same_clock) {
    const CriticalPath cp = critical_path(world, engine.cycle_log(), step_cycles);
    r["control_critical_ms_per_step"] = median(cp.agreed_ms);
    r["control_critical_all_ms_per_step"] = median(cp.all_ms);
  }
  r["step_ms"] = max_over_ranks(world, median(step_ms));
  r["control_ms_per_step"] = max_over_ranks(world, median(control_ms));
  r["control_cpu_ms_per_step"] = max_over_ranks(world, median(control_cpu_ms));
  r["cycles_per_step"] = median(cycles);
  r["coordinator_rounds_per_step"] = median(rounds);
  for (const auto& out : g.outs) {
    TESSERA_CHECK(out.front() == static_cast<float>(1.0) && out.back() == 1.0f,
                  "engine bench: wrong average");
  }
  return r;
}

// Latency of one 4 KiB allreduce through the engine at `cycle` ms (us, median, slowest rank).
double latency_us(comm::Communicator& world, const EngineBenchOptions& o, double cycle) {
  engine::EngineOptions eo = o.engine;
  eo.tunables.cycle_time_ms = cycle;
  engine::Engine engine(world, eo);
  std::vector<float> x(1024, 1.0f), y(1024);
  std::vector<double> us;
  for (int i = 0; i < o.latency_iterations; ++i) {
    comm::barrier(world);
    const auto t0 = Clock::now();
    engine.enqueue_allreduce("latency", x.data(), y.data(), DataType::kFloat32, {1024}).wait();
    if (i >= 10) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return max_over_ranks(world, median(us));
}

void print_report(const nlohmann::json& report, bool same_clock) {
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
  // Cache off over cache on, for each measure of the control plane.
  auto ratio = [&](const char* measure) {
    return report["cache_off"][measure].get<double>() / report["cache_on"][measure].get<double>();
  };
  std::printf("  control plane, cache off / on: %.2fx local wall, %.2fx CPU\n",
              ratio("control_ms_per_step"), ratio("control_cpu_ms_per_step"));
  if (same_clock) {
    std::printf(
        "  control plane on the critical path (from the last rank's arrival; ms per step, on / "
        "off):\n    until the first rank has the agreement %8.3f / %8.3f = %.2fx\n"
        "    until every rank has it               %8.3f / %8.3f = %.2fx\n",
        report["cache_on"]["control_critical_ms_per_step"].get<double>(),
        report["cache_off"]["control_critical_ms_per_step"].get<double>(),
        ratio("control_critical_ms_per_step"),
        report["cache_on"]["control_critical_all_ms_per_step"].get<double>(),
        report["cache_off"]["control_critical_all_ms_per_step"].get<double>(),
        ratio("control_critical_all_ms_per_step"));
  } else {
    std::printf("  (ranks on several hosts: no common clock, so no critical-path figures)\n");
  }
  std::printf("  4 KiB allreduce through the engine: %.1f us (cycle %.1f ms), %.1f us (cycle 0)\n",
              report["latency_4KiB_us"]["cycle_default"].get<double>(),
              report["latency_4KiB_us"]["cycle_default_ms"].get<double>(),
              report["latency_4KiB_us"]["cycle_0ms"].get<double>());
}

}  // namespace

int run_engine_bench(const EngineBenchOptions& o) {
  auto world = comm::Communicator::world();
  Gradients g;
  const bool same_clock = one_host(*world);
  nlohmann::json report = {
      {"ranks", world->size()}, {"tensors", g.shapes.size()}, {"bytes_per_step", g.total * 4}};
  if (world->rank() == 0) {
    std::printf(
        "# tessera bench engine: %d ranks, ResNet-50 gradients: %zu tensors, %zu "
        "parameters, %.1f MB per step; %d steps after %d warm-up, medians\n",
        world->size(), g.shapes.size(), g.total, g.total * 4 / 1e6, o.steps, o.warmup);
    std::printf(
        "# control plane: engine time per step outside data movement (negotiation, and "
        "waiting in it for the other ranks)\n");
  }
  report["mpi_allreduce_ms"] = mpi_allreduce_ms(*world, o, g.total);
  report["cache_on"] = engine_steps(*world, o, g, true, same_clock);
  report["cache_off"] = engine_steps(*world, o, g, false, same_clock);
  report["latency_4KiB_us"]["cycle_default"] =
      latency_us(*world, o, o.engine.tunables.cycle_time_ms);
  report["latency_4KiB_us"]["cycle_0ms"] = latency_us(*world, o, 0.0);
  report["latency_4KiB_us"]["cycle_default_ms"] = o.engine.tunables.cycle_time_ms;
  if (world->rank() == 0) {
    print_report(report, same_clock);
    if (!o.json_path.empty()) std::ofstream(o.json_path) << report.dump(1) << "\n";
  }
  return 0;
}

}  // namespace bench
}  // namespace tessera
