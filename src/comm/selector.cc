#include "comm/selector.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "comm/topology.h"
#include "common/error.h"
#include "common/settings.h"
#include "common/strings.h"

namespace tessera {
namespace comm {
namespace {

[[noreturn]] void bad_clause(const std::string& text, const std::string& clause,
                             const std::string& why) {
  throw InvalidArgument("TESSERA_ALLREDUCE='" + text + "': bad part '" + clause + "': " + why +
                        "; accepted: ALGO or ALGO:LO-HI[;ALGO:LO-HI...], ALGO one of auto ring "
                        "rhd dbtree multicolor hierarchical mpi, LO/HI byte sizes (K/M/G "
                        "suffixes) or max");
}

double log2i(int n) { return std::log2(static_cast<double>(std::max(1, n))); }

}  // namespace

std::vector<SizeRange> parse_override(const std::string& text) {
  std::vector<SizeRange> out;
  if (trim(text).empty()) return out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(';', start);
    if (end == std::string::npos) end = text.size();
    const std::string clause = trim(text.substr(start, end - start));
    start = end + 1;
    if (clause.empty()) {
      if (end == text.size()) break;
      bad_clause(text, clause, "empty clause");
    }
    SizeRange r;
    const size_t colon = clause.find(':');
    try {
      r.algorithm = parse_algorithm(trim(clause.substr(0, colon)));
    } catch (const InvalidArgument&) {
      bad_clause(text, clause, "unknown algorithm '" + trim(clause.substr(0, colon)) + "'");
    }
    if (colon == std::string::npos) {
      r.lo = 0;
      r.hi = std::numeric_limits<size_t>::max();
    } else {
      const std::string range = trim(clause.substr(colon + 1));
      const size_t dash = range.find('-');
      if (dash == std::string::npos) bad_clause(text, clause, "expected LO-HI after ':'");
      const std::string lo = trim(range.substr(0, dash));
      const std::string hi = trim(range.substr(dash + 1));
      try {
        r.lo = parse_bytes(lo);
        r.hi = hi == "max" ? std::numeric_limits<size_t>::max() : parse_bytes(hi);
      } catch (const InvalidArgument& e) {
        bad_clause(text, clause, e.what());
      }
      if (r.lo > r.hi) bad_clause(text, clause, "LO is greater than HI");
    }
    for (const SizeRange& o : out) {
      if (r.lo <= o.hi && o.lo <= r.hi) bad_clause(text, clause, "overlaps an earlier range");
    }
    out.push_back(r);
    if (end == text.size()) break;
  }
  return out;
}

bool can_use(Algorithm a, const CommShape& shape) {
  switch (a) {
    case Algorithm::kAuto:
      return false;
    case Algorithm::kHierarchical:
      return shape.uniform_nodes;
    default:
      return true;
  }
}

namespace {

double formula_us(const CostTable& t, Algorithm a, const CommShape& s, double n) {
  const double p = s.ranks;
  const LinkCost link = s.nodes > 1 ? t.net : t.p2p;
  const double g = t.reduce_us_per_byte;
  switch (a) {
    case Algorithm::kRing:
      return 2 * (p - 1) * link.alpha_us + 2 * (p - 1) / p * n * link.beta_us_per_byte +
             (p - 1) / p * n * g;
    case Algorithm::kRhd:
    case Algorithm::kMpi: {
      int pof2 = 1;
      while (pof2 * 2 <= s.ranks) pof2 *= 2;
      const double q = pof2;
      const double steps = log2i(pof2);
      const bool fold = s.ranks > pof2;
      const double fold_us = fold ? 2 * (link.alpha_us + n * link.beta_us_per_byte) + n * g : 0;
      const double doubling = steps * (link.alpha_us + n * (link.beta_us_per_byte + g));
      const double halving = 2 * steps * link.alpha_us +
                             2 * (q - 1) / q * n * link.beta_us_per_byte + (q - 1) / q * n * g;
      const double us = fold_us + ((n <= 32768 || pof2 == 2) ? doubling : halving);
      // MPI's own choice is unknown to the model: never prefer it without a measurement.
      return a == Algorithm::kMpi ? us * 1.25 : us;
    }
    case Algorithm::kDbtree:
    case Algorithm::kMulticolor: {
      const int k = a == Algorithm::kDbtree ? 2 : t.colors;
      const ColorTrees c = color_trees(s.ranks, k);
      const double part = n / c.colors;
      const double seg = std::min<double>(static_cast<double>(t.segment_bytes), part);
      const double segments = seg > 0 ? std::ceil(part / seg) : 0;
      const double per_iter =
          c.fanout * (link.alpha_us + seg * (link.beta_us_per_byte + g)) * c.colors;
      return (segments + 2 * c.depth) * per_iter;
    }
    case Algorithm::kHierarchical: {
      const double l = s.local_size;
      const double piece = static_cast<double>(t.shm_bytes);
      const double pieces = std::max(1.0, std::ceil(n / piece));
      const double per_piece = std::min(n, piece);
      double local_us;
      if (n <= 16384) {
        local_us = t.shm.alpha_us * (l > 1 ? 1 : 0) + n * t.shm.beta_us_per_byte + (l - 1) * n * g;
      } else {
        local_us =
            pieces * (2 * t.shm.alpha_us + 2 * (l - 1) / l * per_piece * t.shm.beta_us_per_byte +
                      (l - 1) / l * per_piece * g);
      }
      double cross_us = 0;
      if (s.nodes > 1) {
        CommShape cross{s.nodes, s.nodes, 1, true};
        const double chunk = n <= 16384 ? n : n / l;
        CostTable flat = t;
        flat.p2p = t.net;
        flat.measured.clear();
        cross_us = std::min(formula_us(flat, Algorithm::kRing, cross, chunk),
                            formula_us(flat, Algorithm::kRhd, cross, chunk));
      }
      return local_us + cross_us;
    }
    case Algorithm::kAuto:
      break;
  }
  return std::numeric_limits<double>::infinity();
}

// Log-log interpolation between measured points; linear in bytes past the ends.
double interpolate(const std::vector<std::pair<size_t, double>>& pts, double n) {
  if (pts.size() == 1) return pts[0].second;
  const double x = std::log(std::max(1.0, n));
  for (size_t i = 1; i < pts.size(); ++i) {
    if (n <= static_cast<double>(pts[i].first) || i + 1 == pts.size()) {
      const double x0 = std::log(static_cast<double>(std::max<size_t>(1, pts[i - 1].first)));
      const double x1 = std::log(static_cast<double>(std::max<size_t>(1, pts[i].first)));
      const double y0 = std::log(pts[i - 1].second), y1 = std::log(pts[i].second);
      if (n > static_cast<double>(pts[i].first)) {
        // Past the last point: time grows linearly with bytes.
        return pts[i].second * n / static_cast<double>(pts[i].first);
      }
      if (x1 <= x0) return pts[i].second;
      const double f = std::max(0.0, (x - x0) / (x1 - x0));
      return std::exp(y0 + f * (y1 - y0));
    }
  }
  return pts.back().second;
}

}  // namespace

double predict_us(const CostTable& table, Algorithm a, const CommShape& shape, size_t bytes) {
  for (const MeasuredCurve& m : table.measured) {
    if (m.algorithm == a && m.ranks == shape.ranks && m.nodes == shape.nodes && !m.points.empty()) {
      return interpolate(m.points, static_cast<double>(bytes));
    }
  }
  return formula_us(table, a, shape, static_cast<double>(bytes));
}

Algorithm select_allreduce(const CostTable& table, const std::vector<SizeRange>& override_ranges,
                           const CommShape& shape, size_t bytes) {
  for (const SizeRange& r : override_ranges) {
    if (bytes < r.lo || bytes > r.hi || r.algorithm == Algorithm::kAuto) continue;
    if (!can_use(r.algorithm, shape)) {
      throw InvalidArgument(std::string("TESSERA_ALLREDUCE asks for ") +
                            algorithm_name(r.algorithm) + " at " + std::to_string(bytes) +
                            " bytes, which cannot run here: it needs the same number of ranks "
                            "on every node");
    }
    return r.algorithm;
  }
  Algorithm best = Algorithm::kRing;
  double best_us = std::numeric_limits<double>::infinity();
  for (Algorithm a : all_algorithms()) {
    if (!can_use(a, shape)) continue;
    const double us = predict_us(table, a, shape, bytes);
    if (us < best_us) {
      best_us = us;
      best = a;
    }
  }
  return best;
}

LinkCost fit_link(const std::vector<std::array<double, 3>>& rows) {
  // Normal equations of the 2x2 least-squares problem.
  double aa = 0, ab = 0, bb = 0, ay = 0, by = 0;
  for (const auto& r : rows) {
    aa += r[0] * r[0];
    ab += r[0] * r[1];
    bb += r[1] * r[1];
    ay += r[0] * r[2];
    by += r[1] * r[2];
  }
  const double det = aa * bb - ab * ab;
  TESSERA_CHECK(rows.size() >= 2 && std::fabs(det) > 1e-12 * std::max(1.0, aa * bb),
                "fit_link needs at least two measurements at different sizes");
  LinkCost l;
  l.alpha_us = std::max(0.0, (ay * bb - by * ab) / det);
  l.beta_us_per_byte = std::max(0.0, (aa * by - ab * ay) / det);
  return l;
}

std::string cost_table_to_json(const CostTable& t) {
  nlohmann::json j;
  auto link = [](const LinkCost& l) {
    return nlohmann::json{{"alpha_us", l.alpha_us}, {"beta_us_per_byte", l.beta_us_per_byte}};
  };
  j["p2p"] = link(t.p2p);
  j["net"] = link(t.net);
  j["shm"] = link(t.shm);
  j["reduce_us_per_byte"] = t.reduce_us_per_byte;
  j["node_copy_gbps"] = t.node_copy_gbps;
  j["segment_bytes"] = t.segment_bytes;
  j["shm_bytes"] = t.shm_bytes;
  j["colors"] = t.colors;
  j["measured"] = nlohmann::json::array();
  for (const MeasuredCurve& m : t.measured) {
    nlohmann::json pts = nlohmann::json::array();
    for (const auto& p : m.points) pts.push_back({p.first, p.second});
    j["measured"].push_back({{"algorithm", algorithm_name(m.algorithm)},
                             {"ranks", m.ranks},
                             {"nodes", m.nodes},
                             {"points", pts}});
  }
  return j.dump(1);
}

CostTable cost_table_from_json(const std::string& text) {
  CostTable t;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(std::string("cost table is not valid JSON: ") + e.what());
  }
  const char* field = "";
  try {
    auto link = [&](const char* name, LinkCost* l) {
      field = name;
      if (!j.contains(name)) return;
      l->alpha_us = j.at(name).at("alpha_us").get<double>();
      l->beta_us_per_byte = j.at(name).at("beta_us_per_byte").get<double>();
    };
    link("p2p", &t.p2p);
    link("net", &t.net);
    link("shm", &t.shm);
    field = "reduce_us_per_byte";
    if (j.contains(field)) t.reduce_us_per_byte = j.at(field).get<double>();
    field = "node_copy_gbps";
    if (j.contains(field)) t.node_copy_gbps = j.at(field).get<double>();
    field = "segment_bytes";
    if (j.contains(field)) t.segment_bytes = j.at(field).get<size_t>();
    field = "shm_bytes";
    if (j.contains(field)) t.shm_bytes = j.at(field).get<size_t>();
    field = "colors";
    if (j.contains(field)) t.colors = j.at(field).get<int>();
    field = "measured";
    if (j.contains(field)) {
      for (const auto& m : j.at(field)) {
        MeasuredCurve c;
        c.algorithm = parse_algorithm(m.at("algorithm").get<std::string>());
        c.ranks = m.at("ranks").get<int>();
        c.nodes = m.at("nodes").get<int>();
        for (const auto& p : m.at("points")) {
          const double us = p.at(1).get<double>();
          if (!(us > 0)) throw InvalidArgument("a measured time must be > 0");
          c.points.emplace_back(p.at(0).get<size_t>(), us);
        }
        std::sort(c.points.begin(), c.points.end());
        t.measured.push_back(std::move(c));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(std::string("cost table field '") + field + "': " + e.what());
  }
  return t;
}

}  // namespace comm
}  // namespace tessera
