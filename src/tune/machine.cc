#include "tune/machine.h"

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/atomic_file.h"
#include "common/error.h"

namespace tessera {
namespace tune {
namespace {

[[noreturn]] void bad_field(const std::string& field, const std::string& why) {
  throw InvalidArgument("machine description field '" + field + "': " + why);
}

void positive(const std::string& field, double v, bool allow_zero = false) {
  if (!(allow_zero ? v >= 0 : v > 0) || !std::isfinite(v)) {
    std::ostringstream os;
    os << "is " << v << "; it must be a number " << (allow_zero ? ">= 0" : "> 0");
    bad_field(field, os.str());
  }
}

Machine summit() {
  // Summit (OLCF): 6 V100 per node, NVLink 2 at 50 GB/s per direction between the GPUs of a
  // socket; dual-rail EDR InfiniBand, 23 GB/s of injection per node (both rails), non-blocking
  // fat tree. Latencies are typical of NCCL over NVLink (a few us per step) and of MPI/IB.
  Machine m;
  m.name = "summit";
  m.nodes = 4608;
  m.ranks_per_node = 6;
  m.intra = {2.0, 50.0};
  m.shm = m.intra;  // a node's GPUs reduce over NVLink
  m.inter = {3.0, 23.0};
  m.rails = 2;
  m.reduce_gbps = 300.0;
  m.node_copy_gbps = 6 * 400.0;  // each V100 copies within its own HBM2 (900 GB/s peak)  // a V100
                                 // sums at a good part of its ~900 GB/s memory bandwidth
  m.cores_per_node = 0;
  // tessera's coordinator decodes and matches each rank's request: ~1.4 us per request measured
  // on this machine (docs/benchmarks.md, "The engine"), taken for Summit's POWER9 cores too.
  m.coordinator_us_per_request = 1.4;
  return m;
}

double last_level_cache_bytes() {
  // sysfs first ("32768K"): glibc's sysconf answers 0 on some virtual machines.
  for (const char* path : {"/sys/devices/system/cpu/cpu0/cache/index3/size",
                           "/sys/devices/system/cpu/cpu0/cache/index2/size"}) {
    std::ifstream in(path);
    double v = 0;
    std::string unit;
    if (in >> v) {
      in >> unit;
      if (unit == "K") v *= 1024;
      if (unit == "M") v *= 1024 * 1024;
      if (v > 0) return v;
    }
  }
  const long bytes = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return bytes > 0 ? static_cast<double>(bytes) : 8.0 * (1 << 20);
}

Machine local(const std::string& table_path) {
  comm::CostTable t;
  if (!table_path.empty()) {
    const std::vector<char> bytes = read_file(table_path);
    t = comm::cost_table_from_json(std::string(bytes.begin(), bytes.end()));
  }
  Machine m;
  m.name = "local";
  m.nodes = 1;
  m.ranks_per_node = 64;
  m.intra = {t.p2p.alpha_us, 1e-3 / t.p2p.beta_us_per_byte};
  m.shm = {t.shm.alpha_us, 1e-3 / t.shm.beta_us_per_byte};
  m.inter = {t.net.alpha_us, 1e-3 / t.net.beta_us_per_byte};
  m.reduce_gbps = 1e-3 / t.reduce_us_per_byte;
  m.cores_per_node = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  m.switch_us = 1.5;  // a Linux context switch, typical; docs/scaling.md shows what it matches
  m.coordinator_us_per_request = 1.4;  // docs/benchmarks.md, "The engine"
  m.node_copy_gbps = t.node_copy_gbps;
  // The shared-memory algorithm's measured curve on one node (the calibration's ranks): its
  // throughput over every rank's bytes, in the cache and beyond it.
  m.cache_bytes = last_level_cache_bytes();
  for (const comm::MeasuredCurve& c : t.measured) {
    if (c.algorithm != comm::Algorithm::kHierarchical || c.nodes != 1 || c.points.empty()) continue;
    const auto& big = c.points.back();
    m.node_allreduce_gbps = c.ranks * static_cast<double>(big.first) / big.second * 1e-3;
    for (const auto& pt : c.points) {
      // The largest size whose vectors fill at most half the cache (the rest holds the
      // staging buffers).
      if (c.ranks * static_cast<double>(pt.first) * 2 <= m.cache_bytes && pt.first >= 65536) {
        m.cache_allreduce_gbps = c.ranks * static_cast<double>(pt.first) / pt.second * 1e-3;
      }
    }
    if (m.cache_allreduce_gbps <= 0) m.cache_allreduce_gbps = m.node_allreduce_gbps;
  }
  m.segment_bytes = static_cast<double>(t.segment_bytes);
  m.shm_bytes = static_cast<double>(t.shm_bytes);
  m.colors = t.colors;
  return m;
}

}  // namespace

void validate(const Machine& m) {
  if (m.nodes < 1) bad_field("nodes", "is " + std::to_string(m.nodes) + "; it must be >= 1");
  if (m.ranks_per_node < 1) {
    bad_field("ranks_per_node", "is " + std::to_string(m.ranks_per_node) + "; it must be >= 1");
  }
  positive("intra.latency_us", m.intra.latency_us, true);
  positive("intra.gbps", m.intra.gbps);
  positive("shm.latency_us", m.shm.latency_us, true);
  positive("shm.gbps", m.shm.gbps);
  positive("inter.latency_us", m.inter.latency_us, true);
  positive("inter.gbps", m.inter.gbps);
  if (m.rails < 1) bad_field("rails", "is " + std::to_string(m.rails) + "; it must be >= 1");
  positive("reduce_gbps", m.reduce_gbps);
  if (m.cores_per_node < 0) bad_field("cores_per_node", "must be >= 0 (0: a processor per rank)");
  positive("coordinator_us_per_request", m.coordinator_us_per_request, true);
  positive("spec_bytes", m.spec_bytes);
  positive("compute_jitter", m.compute_jitter, true);
  positive("node_copy_gbps", m.node_copy_gbps, true);
  positive("switch_us", m.switch_us, true);
  positive("node_allreduce_gbps", m.node_allreduce_gbps, true);
  positive("cache_allreduce_gbps", m.cache_allreduce_gbps, true);
  positive("cache_bytes", m.cache_bytes, true);
  positive("segment_bytes", m.segment_bytes);
  positive("shm_bytes", m.shm_bytes);
  if (m.colors < 1) bad_field("colors", "must be >= 1");
}

Machine machine_preset(const std::string& name, const std::string& cost_table_path) {
  Machine m;
  if (name == "summit") {
    m = summit();
  } else if (name == "local") {
    m = local(cost_table_path);
  } else {
    throw InvalidArgument("unknown machine preset '" + name +
                          "'; accepted: summit, local (or --machine FILE.json)");
  }
  validate(m);
  return m;
}

Machine machine_from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(std::string("machine description is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw InvalidArgument("machine description must be a JSON object");
  Machine m;
  const bool from_preset = j.contains("preset");
  if (from_preset) m = machine_preset(j.at("preset").get<std::string>());
  auto number = [&](const nlohmann::json& obj, const std::string& prefix, const char* key,
                    double* out, bool required) {
    const std::string field = prefix + key;
    if (!obj.contains(key)) {
      if (required) bad_field(field, "is missing");
      return;
    }
    if (!obj.at(key).is_number()) bad_field(field, "must be a number, got " + obj.at(key).dump());
    *out = obj.at(key).get<double>();
  };
  auto link = [&](const char* key, Link* l, bool required) {
    if (!j.contains(key)) {
      if (required) bad_field(key, "is missing (an object with latency_us and gbps)");
      return;
    }
    if (!j.at(key).is_object()) bad_field(key, "must be an object with latency_us and gbps");
    number(j.at(key), std::string(key) + ".", "latency_us", &l->latency_us, true);
    number(j.at(key), std::string(key) + ".", "gbps", &l->gbps, true);
  };
  const bool req = !from_preset;
  double nodes = m.nodes, rpn = m.ranks_per_node, rails = m.rails, cores = m.cores_per_node,
         colors = m.colors;
  number(j, "", "nodes", &nodes, req);
  number(j, "", "ranks_per_node", &rpn, req);
  link("intra", &m.intra, req);
  link("inter", &m.inter, req);
  if (!from_preset) m.shm = m.intra;
  link("shm", &m.shm, false);
  number(j, "", "rails", &rails, false);
  number(j, "", "reduce_gbps", &m.reduce_gbps, req);
  number(j, "", "cores_per_node", &cores, false);
  number(j, "", "coordinator_us_per_request", &m.coordinator_us_per_request, false);
  number(j, "", "spec_bytes", &m.spec_bytes, false);
  number(j, "", "compute_jitter", &m.compute_jitter, false);
  number(j, "", "node_copy_gbps", &m.node_copy_gbps, false);
  number(j, "", "switch_us", &m.switch_us, false);
  number(j, "", "node_allreduce_gbps", &m.node_allreduce_gbps, false);
  number(j, "", "cache_allreduce_gbps", &m.cache_allreduce_gbps, false);
  number(j, "", "cache_bytes", &m.cache_bytes, false);
  number(j, "", "segment_bytes", &m.segment_bytes, false);
  number(j, "", "shm_bytes", &m.shm_bytes, false);
  number(j, "", "colors", &colors, false);
  auto integer = [&](const char* field, double v) {
    if (v != std::floor(v) || std::abs(v) > 1e9) bad_field(field, "must be an integer");
    return static_cast<int>(v);
  };
  m.nodes = integer("nodes", nodes);
  m.ranks_per_node = integer("ranks_per_node", rpn);
  m.rails = integer("rails", rails);
  m.cores_per_node = integer("cores_per_node", cores);
  m.colors = integer("colors", colors);
  if (j.contains("name")) m.name = j.at("name").get<std::string>();
  if (m.name.empty()) m.name = "custom";
  validate(m);
  return m;
}

comm::CostTable cost_table_of(const Machine& m) {
  comm::CostTable t;
  t.p2p = {m.intra.latency_us, 1e-3 / m.intra.gbps};
  t.net = {m.inter.latency_us, 1e-3 / m.inter.gbps};
  t.shm = {m.shm.latency_us, 1e-3 / m.shm.gbps};
  t.reduce_us_per_byte = 1e-3 / m.reduce_gbps;
  t.segment_bytes = static_cast<size_t>(m.segment_bytes);
  t.shm_bytes = static_cast<size_t>(m.shm_bytes);
  t.colors = m.colors;
  return t;
}

}  // namespace tune
}  // namespace tessera
