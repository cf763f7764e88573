#include "tune/simulator.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "tune/cost_model.h"

namespace tessera {
namespace tune {

Workload workload_from_sizes(const std::string& name, const std::vector<double>& bytes,
                             double compute_s, double images_per_step, double forward_fraction) {
  TESSERA_CHECK(compute_s > 0, "workload '", name, "': compute time must be > 0 s, got ",
                compute_s);
  TESSERA_CHECK(images_per_step > 0, "workload '", name, "': images per step must be > 0");
  TESSERA_CHECK(forward_fraction >= 0 && forward_fraction < 1, "workload '", name,
                "': the forward fraction must be in [0, 1)");
  Workload w;
  w.name = name;
  w.compute_s = compute_s;
  w.images_per_step = images_per_step;
  const double forward = compute_s * forward_fraction;
  const double backward = compute_s - forward;
  const size_t n = bytes.size();
  for (size_t i = 0; i < n; ++i) {
    w.gradients.push_back(
        {name + "." + std::to_string(i), bytes[i],
         forward + backward * static_cast<double>(i + 1) / static_cast<double>(n)});
  }
  return w;
}

namespace {

// The algorithm override's choice for `bytes`: the range that holds it, else auto.
comm::Algorithm override_for(const std::vector<comm::SizeRange>& ranges, double bytes) {
  for (const comm::SizeRange& r : ranges) {
    if (bytes >= static_cast<double>(r.lo) && bytes <= static_cast<double>(r.hi)) {
      return r.algorithm;
    }
  }
  return comm::Algorithm::kAuto;
}

}  // namespace

StepResult simulate_step(const Machine& m, const Workload& w, int gpus, const engine::Tunables& s) {
  const std::vector<comm::SizeRange> ranges = comm::parse_override(s.allreduce);
  TESSERA_CHECK(gpus >= 1, "the GPU count must be >= 1, got ", gpus);
  TESSERA_CHECK(static_cast<long long>(gpus) <= static_cast<long long>(m.nodes) * m.ranks_per_node,
                gpus, " GPUs exceed machine '", m.name, "' (", m.nodes, " nodes x ",
                m.ranks_per_node, ")");
  TESSERA_CHECK(!w.gradients.empty(), "workload '", w.name, "' has no gradients");
  TESSERA_CHECK(s.cycle_time_ms >= 0, "cycle time must be >= 0");
  StepResult r;
  r.gpus = gpus;
  r.compute_s = w.compute_s;
  std::vector<Gradient> g = w.gradients;
  std::stable_sort(g.begin(), g.end(),
                   [](const Gradient& a, const Gradient& b) { return a.ready_s < b.ready_s; });
  if (gpus == 1) {
    // One GPU has nothing to agree on or reduce: the engine passes tensors straight through.
    r.step_s = w.compute_s;
    r.throughput = w.images_per_step / r.step_s;
    r.efficiency = 1.0;
    return r;
  }
  const double cycle = s.cycle_time_ms * 1e-3;
  size_t next = 0;    // first gradient not yet negotiated
  double engine = 0;  // when the engine thread is free for its next cycle
  double last_start = -1e300;
  double largest = -1;
  double end = 0;
  const int tensors = static_cast<int>(g.size());
  while (next < g.size()) {
    // The next cycle starts a cycle time after the last one began (or once the engine is free);
    // with cycle time 0 it starts when work arrives.
    double start = std::max(engine, last_start + cycle);
    if (g[next].ready_s > start) {
      start = cycle > 0 ? start + std::ceil((g[next].ready_s - start) / cycle) * cycle
                        : g[next].ready_s;
    }
    size_t stop = next;
    while (stop < g.size() && g[stop].ready_s <= start + 1e-15) ++stop;
    const int requests = static_cast<int>(stop - next);
    const double neg = negotiation_seconds(m, gpus, requests, tensors, s.cache_enabled);
    double t = start + neg;
    r.control_s += neg;
    ++r.cycles;
    // Fuse in order up to the threshold; a tensor larger than it travels alone.
    size_t i = next;
    while (i < stop) {
      double bytes = g[i].bytes;
      size_t j = i + 1;
      const double threshold = static_cast<double>(s.fusion_threshold);
      while (j < stop && bytes + g[j].bytes <= threshold) bytes += g[j++].bytes;
      const comm::Algorithm algorithm = override_for(ranges, bytes);
      double d = allreduce_seconds(m, algorithm, gpus, bytes);
      if (j - i > 1 && gpus > 1) d += fusion_copy_seconds(m, gpus, bytes);
      if (bytes > largest) {
        largest = bytes;
        r.largest_algorithm =
            algorithm == comm::Algorithm::kAuto ? best_algorithm(m, gpus, bytes) : algorithm;
      }
      t += d;
      r.data_s += d;
      ++r.buffers;
      i = j;
    }
    engine = t;
    end = std::max(end, t);
    last_start = start;
    next = stop;
  }
  // The slowest GPU's compute: the expected maximum of N normal samples, ~sigma sqrt(2 ln N).
  const double slowest =
      w.compute_s * (1 + m.compute_jitter * std::sqrt(2 * std::log(static_cast<double>(gpus))));
  end += slowest - w.compute_s;  // the last gradients wait for the slowest backward
  r.step_s = std::max(slowest, end);
  r.exposed_s = r.step_s - w.compute_s;
  r.throughput = gpus * w.images_per_step / r.step_s;
  r.efficiency = w.compute_s / r.step_s;
  return r;
}

}  // namespace tune
}  // namespace tessera
