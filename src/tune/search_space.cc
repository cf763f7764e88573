#include "tune/search_space.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "common/error.h"
#include "common/strings.h"

namespace tessera {
namespace tune {
namespace {

[[noreturn]] void bad(const std::string& field, const std::string& value, const std::string& why) {
  throw InvalidArgument("TESSERA_AUTOTUNE_BOUNDS field '" + field + "' = '" + value + "': " + why +
                        "; accepted: fusion_threshold=LO-HI and segment_bytes=LO-HI (byte sizes "
                        ">= 1K), cycle_time_ms=LO-HI (ms >= 0), colors=LO-HI (1 to 16), "
                        "algorithm=a,b,... (auto ring rhd dbtree multicolor hierarchical mpi), "
                        "cache=on,off");
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, sep)) out.push_back(trim(part));
  return out;
}

double number(const std::string& field, const std::string& value, const std::string& text,
              bool bytes) {
  if (bytes) {
    try {
      return static_cast<double>(parse_bytes(text));
    } catch (const InvalidArgument& e) {
      bad(field, value, e.what());
    }
  }
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v))
    bad(field, value, "'" + text + "' is not a number");
  return v;
}

Range range(const std::string& field, const std::string& value, bool bytes, double min,
            double max) {
  const size_t dash = value.find('-', 1);
  if (dash == std::string::npos) bad(field, value, "expected LO-HI");
  Range r{number(field, value, trim(value.substr(0, dash)), bytes),
          number(field, value, trim(value.substr(dash + 1)), bytes)};
  if (r.lo > r.hi) bad(field, value, "LO is greater than HI, so no value is left to search");
  if (r.lo < min || r.hi > max) {
    std::ostringstream os;
    os << "outside " << min << " to " << max;
    bad(field, value, os.str());
  }
  return r;
}

double round_to(double v, double unit) { return std::round(v / unit) * unit; }

}  // namespace

SearchSpace parse_bounds(const std::string& text) {
  SearchSpace s;
  for (const std::string& clause : split(text, ';')) {
    if (clause.empty()) continue;
    const size_t eq = clause.find('=');
    if (eq == std::string::npos) bad(clause, "", "expected name=value");
    const std::string field = trim(clause.substr(0, eq));
    const std::string value = trim(clause.substr(eq + 1));
    if (field == "fusion_threshold") {
      s.fusion_threshold = range(field, value, true, 1024, 1ull << 40);
    } else if (field == "segment_bytes") {
      s.segment_bytes = range(field, value, true, 1024, 1ull << 30);
    } else if (field == "cycle_time_ms") {
      s.cycle_time_ms = range(field, value, false, 0, 1e6);
    } else if (field == "colors") {
      s.colors = range(field, value, false, 1, 16);
      if (std::ceil(s.colors.lo) > std::floor(s.colors.hi)) bad(field, value, "holds no integer");
    } else if (field == "algorithm") {
      s.algorithms.clear();
      for (const std::string& a : split(value, ',')) {
        if (a.empty()) continue;
        try {
          s.algorithms.push_back(comm::parse_algorithm(a));
        } catch (const InvalidArgument&) {
          bad(field, value, "unknown algorithm '" + a + "'");
        }
      }
      if (s.algorithms.empty()) bad(field, value, "no algorithm left to search");
    } else if (field == "cache") {
      s.cache.clear();
      for (const std::string& a : split(value, ',')) {
        if (a == "on") {
          s.cache.push_back(true);
        } else if (a == "off") {
          s.cache.push_back(false);
        } else if (!a.empty()) {
          bad(field, value, "'" + a + "' is neither on nor off");
        }
      }
      if (s.cache.empty()) bad(field, value, "no value left to search");
    } else {
      bad(field, value, "unknown field");
    }
  }
  return s;
}

comm::Algorithm algorithm_of(const Tunables& t) {
  const std::vector<comm::SizeRange> ranges = comm::parse_override(t.allreduce);
  const bool one =
      ranges.size() == 1 && ranges[0].lo == 0 && ranges[0].hi == std::numeric_limits<size_t>::max();
  return one ? ranges[0].algorithm : comm::Algorithm::kAuto;
}

Tunables with_algorithm(Tunables t, comm::Algorithm a) {
  t.allreduce = a == comm::Algorithm::kAuto ? "" : comm::algorithm_name(a);
  return t;
}

Fixed Fixed::from(const SettingValues& given) {
  auto has = [&](const char* name) { return given.count(name) > 0; };
  Fixed f;
  f.algorithm = has(comm::kAllreduce.name);
  f.cache = has(engine::kCacheCapacity.name);
  f.fusion_threshold = has(engine::kFusionThreshold.name);
  f.cycle_time = has(engine::kCycleTime.name);
  f.segment_bytes = has(comm::kSegmentBytes.name);
  f.colors = has(comm::kColors.name);
  return f;
}

std::vector<std::pair<std::string, std::string>> setting_values(const Tunables& t, const Fixed& f) {
  std::vector<std::pair<std::string, std::string>> out;
  // The text itself, so the file gives back exactly `t` ("" is auto).
  if (!f.algorithm) out.emplace_back(comm::kAllreduce.name, t.allreduce);
  if (!f.cache) {
    out.emplace_back(engine::kCacheCapacity.name,
                     t.cache_enabled ? std::to_string(engine::kCacheCapacity.fallback) : "0");
  }
  if (!f.fusion_threshold) {
    out.emplace_back(engine::kFusionThreshold.name, std::to_string(t.fusion_threshold));
  }
  // The declaration's text is the shortest that reads back exactly (an ostream's default six
  // digits lost the last bits of a tuned 1.3800000000000001 ms).
  if (!f.cycle_time)
    out.emplace_back(engine::kCycleTime.name, engine::kCycleTime.format(t.cycle_time_ms));
  if (!f.segment_bytes) out.emplace_back(comm::kSegmentBytes.name, std::to_string(t.segment_bytes));
  if (!f.colors) out.emplace_back(comm::kColors.name, std::to_string(t.colors));
  return out;
}

std::string describe(const Tunables& c) {
  std::ostringstream os;
  os << "algorithm=" << (c.allreduce.empty() ? "auto" : c.allreduce)
     << " cache=" << (c.cache_enabled ? "on" : "off") << " fusion_threshold=" << c.fusion_threshold
     << " cycle_time_ms=" << c.cycle_time_ms << " segment_bytes=" << c.segment_bytes
     << " colors=" << c.colors;
  return os.str();
}

bool uses_segments(comm::Algorithm a) {
  return a == comm::Algorithm::kAuto || a == comm::Algorithm::kRing ||
         a == comm::Algorithm::kDbtree || a == comm::Algorithm::kMulticolor;
}
bool uses_colors(comm::Algorithm a) {
  return a == comm::Algorithm::kAuto || a == comm::Algorithm::kMulticolor;
}

const char* dim_name(Dim d) {
  switch (d) {
    case Dim::kFusionThreshold:
      return "fusion_threshold";
    case Dim::kCycleTime:
      return "cycle_time_ms";
    case Dim::kSegmentBytes:
      return "segment_bytes";
    case Dim::kColors:
      return "colors";
  }
  return "?";
}

std::vector<Dim> continuous_dims(const SearchSpace& s, const Fixed& f, comm::Algorithm a) {
  std::vector<Dim> d;
  if (!f.fusion_threshold && s.fusion_threshold.hi > s.fusion_threshold.lo) {
    d.push_back(Dim::kFusionThreshold);
  }
  if (!f.cycle_time && s.cycle_time_ms.hi > s.cycle_time_ms.lo) d.push_back(Dim::kCycleTime);
  if (!f.segment_bytes && uses_segments(a) && s.segment_bytes.hi > s.segment_bytes.lo) {
    d.push_back(Dim::kSegmentBytes);
  }
  if (!f.colors && uses_colors(a) && s.colors.hi > s.colors.lo) d.push_back(Dim::kColors);
  return d;
}

namespace {

struct Axis {
  Range r;
  bool log;
};

Axis axis(const SearchSpace& s, Dim d) {
  switch (d) {
    case Dim::kFusionThreshold:
      return {s.fusion_threshold, true};
    case Dim::kCycleTime:
      return {s.cycle_time_ms, false};
    case Dim::kSegmentBytes:
      return {s.segment_bytes, true};
    case Dim::kColors:
      return {s.colors, false};
  }
  return {{0, 1}, false};
}

double value_of(const Tunables& c, Dim d) {
  switch (d) {
    case Dim::kFusionThreshold:
      return static_cast<double>(c.fusion_threshold);
    case Dim::kCycleTime:
      return c.cycle_time_ms;
    case Dim::kSegmentBytes:
      return static_cast<double>(c.segment_bytes);
    case Dim::kColors:
      return c.colors;
  }
  return 0;
}

}  // namespace

std::vector<double> to_unit(const SearchSpace& s, const std::vector<Dim>& dims, const Tunables& c) {
  std::vector<double> u;
  for (Dim d : dims) {
    const Axis a = axis(s, d);
    double v = std::min(a.r.hi, std::max(a.r.lo, value_of(c, d)));
    double lo = a.r.lo, hi = a.r.hi;
    if (a.log) {
      v = std::log(v);
      lo = std::log(lo);
      hi = std::log(hi);
    }
    u.push_back(hi > lo ? (v - lo) / (hi - lo) : 0.0);
  }
  return u;
}

Tunables from_unit(const SearchSpace& s, const std::vector<Dim>& dims, const std::vector<double>& u,
                   Tunables c) {
  TESSERA_CHECK(u.size() == dims.size(), "from_unit: ", u.size(), " coordinates for ", dims.size(),
                " dimensions");
  for (size_t i = 0; i < dims.size(); ++i) {
    const Axis a = axis(s, dims[i]);
    const double t = std::min(1.0, std::max(0.0, u[i]));
    double v = a.log ? std::exp(std::log(a.r.lo) + t * (std::log(a.r.hi) - std::log(a.r.lo)))
                     : a.r.lo + t * (a.r.hi - a.r.lo);
    switch (dims[i]) {
      case Dim::kFusionThreshold:
        v = std::min(a.r.hi, std::max(a.r.lo, round_to(v, 1024)));
        c.fusion_threshold = static_cast<size_t>(v);
        break;
      case Dim::kCycleTime:
        c.cycle_time_ms = std::min(a.r.hi, std::max(a.r.lo, round_to(v, 0.01)));
        break;
      case Dim::kSegmentBytes:
        v = std::min(a.r.hi, std::max(a.r.lo, round_to(v, 1024)));
        c.segment_bytes = static_cast<size_t>(v);
        break;
      case Dim::kColors:
        c.colors = static_cast<int>(
            std::min(std::floor(a.r.hi), std::max(std::ceil(a.r.lo), std::round(v))));
        break;
    }
  }
  return c;
}

}  // namespace tune
}  // namespace tessera
