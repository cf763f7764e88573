#include "tune/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"

namespace tessera {
namespace tune {
namespace {

using comm::Algorithm;

double log2_ceil(double p) { return p <= 1 ? 0 : std::ceil(std::log2(p)); }

// Microseconds across nodes. p ranks, L per node, m nodes.
double multi_node_us(const Machine& mc, Algorithm a, int p_int, double n) {
  const double p = p_int;
  const double L = std::min(p_int, mc.ranks_per_node);
  const double m = std::ceil(p / L);
  const double ae = mc.inter.latency_us, be = 1e-3 / mc.inter.gbps;  // us, us per byte
  const double g = 1e-3 / mc.reduce_gbps;
  const double seg = std::min(mc.segment_bytes, std::max(1.0, n / 2));
  switch (a) {
    case Algorithm::kRing:
      // Ranks in node order: each node sends one stream out and takes one in.
      return 2 * (p - 1) * ae + 2 * (p - 1) / p * n * be + (p - 1) / p * n * g;
    case Algorithm::kRhd:
    case Algorithm::kMpi: {
      // Partners at distances >= L are off-node, and then all L ranks of a node send at once.
      const double us = 2 * log2_ceil(p) * ae + 2 * (p - 1) / p * n * be * L + n * g;
      return a == Algorithm::kMpi ? us * 1.25 : us;
    }
    case Algorithm::kDbtree:
    case Algorithm::kMulticolor: {
      // Pipelined trees: each node's link carries about the whole vector per direction, the
      // pipeline fills over the depth of the tree (both ways), once per color.
      const double colors = a == Algorithm::kDbtree ? 2 : std::max(2, mc.colors);
      const double depth = log2_ceil(p);
      return 2 * depth * (ae + seg * be) * (colors / 2) + n * be + n * g;
    }
    case Algorithm::kHierarchical: {
      // Within the node over the intra links (the selector's formula), then L concurrent
      // cross-node allreduces of n/L each, sharing the node's injection: ring or tree.
      const comm::CostTable t = cost_table_of(mc);
      const double local = comm::predict_us(t, Algorithm::kHierarchical,
                                            {static_cast<int>(L), 1, static_cast<int>(L), true}, n);
      const double chunk = n / L;
      const double ring = 2 * (m - 1) * ae + 2 * (m - 1) / m * n * be + (m - 1) / m * chunk * g;
      const double tree = 2 * log2_ceil(m) * (ae + std::min(seg, chunk) * be) + n * be + chunk * g;
      return local + std::min(ring, tree);
    }
    case Algorithm::kAuto:
      break;
  }
  return std::numeric_limits<double>::infinity();
}

double one_node_us(const Machine& mc, Algorithm a, int p, double n) {
  // More ranks than cores: every rank's copies and reductions share the cores, and every
  // synchronisation waits for the ranks beyond the cores to be scheduled.
  const bool over = mc.cores_per_node > 0 && p > mc.cores_per_node;
  const double share = over ? static_cast<double>(p) / mc.cores_per_node : 1.0;
  const double wait_us = over ? (p - mc.cores_per_node) * mc.switch_us : 0.0;
  const comm::CostTable t = cost_table_of(mc);
  if (a == Algorithm::kHierarchical && mc.node_allreduce_gbps > 0) {
    // One shared memory does all the work: every rank's vector passes through it, at the
    // cache's speed while they all fit (in the part of the cache a rank keeps between its turns
    // on a core) and the memory's beyond; two synchronisations per staged piece.
    const double all = p * n;
    const double gbps =
        all <= mc.cache_bytes / 2 / share ? mc.cache_allreduce_gbps : mc.node_allreduce_gbps;
    const double pieces = std::max(1.0, std::ceil(n / mc.shm_bytes));
    return 2 * pieces * (share * mc.shm.latency_us + wait_us) + all / gbps * 1e-3;
  }
  return share * comm::predict_us(t, a, {p, 1, p, true}, static_cast<size_t>(n));
}

}  // namespace

const std::vector<comm::Algorithm>& modelled_algorithms() {
  static const std::vector<Algorithm> v = {Algorithm::kRing, Algorithm::kRhd, Algorithm::kDbtree,
                                           Algorithm::kMulticolor, Algorithm::kHierarchical};
  return v;
}

double allreduce_seconds(const Machine& m, Algorithm a, int gpus, double bytes) {
  TESSERA_CHECK(gpus >= 1, "allreduce_seconds: gpus must be >= 1, got ", gpus);
  if (gpus == 1 || bytes <= 0) return 0;
  if (a == Algorithm::kAuto) a = best_algorithm(m, gpus, bytes);
  const double us =
      gpus <= m.ranks_per_node ? one_node_us(m, a, gpus, bytes) : multi_node_us(m, a, gpus, bytes);
  return us * 1e-6;
}

Algorithm best_algorithm(const Machine& m, int gpus, double bytes) {
  Algorithm best = Algorithm::kRing;
  double best_s = std::numeric_limits<double>::infinity();
  for (Algorithm a : modelled_algorithms()) {
    const double s = allreduce_seconds(m, a, gpus, bytes);
    if (s < best_s) {
      best_s = s;
      best = a;
    }
  }
  return best;
}

double fusion_copy_seconds(const Machine& m, int gpus, double bytes) {
  if (m.node_copy_gbps <= 0 || bytes <= 0) return 0;
  // Into the buffer and out of it, every rank of the node at once.
  const double ranks = std::min(gpus, m.ranks_per_node);
  return 2 * ranks * bytes / (m.node_copy_gbps * 1e9);
}

double negotiation_seconds(const Machine& m, int gpus, int requests, int cached_tensors,
                           bool cache) {
  if (gpus <= 1) return 0;
  // The vote: status bits and one bit per cache entry, in 64-bit words.
  const double words = std::ceil((3.0 + (cache ? cached_tensors : 0)) / 64.0);
  double s = allreduce_seconds(m, Algorithm::kAuto, gpus, 8 * words);
  if (!cache && requests > 0) {
    // Every rank's specs reach the coordinating logic (a gather's latency tree, its bytes
    // through one node's link), which decodes and matches each of them.
    const double total = static_cast<double>(gpus) * requests;
    const Link& link = gpus <= m.ranks_per_node ? m.intra : m.inter;
    s += (2 * log2_ceil(gpus) * link.latency_us + total * m.spec_bytes * 1e-3 / link.gbps +
          total * m.coordinator_us_per_request) *
         1e-6;
  }
  return s;
}

}  // namespace tune
}  // namespace tessera
