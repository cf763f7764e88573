// What the autotuner searches: the engine's knobs, their bounds, and which of them it may touch.
// Pure: parsing TESSERA_AUTOTUNE_BOUNDS, a configuration's knob values, moving between a
// configuration and the unit cube the Gaussian process works in.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "comm/algorithm.h"
#include "common/settings.h"
#include "engine/options.h"

namespace tessera {
namespace tune {

struct Range {
  double lo = 0, hi = 0;
};

// Bounds of the search. The defaults hold every knob's default value (checked by a test).
struct SearchSpace {
  Range fusion_threshold{64.0 * 1024, 256.0 * 1024 * 1024};  // bytes, searched on a log scale
  Range cycle_time_ms{0.0, 10.0};
  Range segment_bytes{16.0 * 1024, 4.0 * 1024 * 1024};  // bytes, log scale
  Range colors{2, 8};                                   // integers
  std::vector<comm::Algorithm> algorithms{
      comm::Algorithm::kAuto,   comm::Algorithm::kRing,       comm::Algorithm::kRhd,
      comm::Algorithm::kDbtree, comm::Algorithm::kMulticolor, comm::Algorithm::kHierarchical,
      comm::Algorithm::kMpi};
  std::vector<bool> cache{true, false};
};

// Parses "name=LO-HI;name=a,b,..." over the defaults (empty text: the defaults). Names:
// fusion_threshold, segment_bytes (byte sizes), cycle_time_ms (numbers >= 0), colors (integers
// 1-16), algorithm (a list of algorithm names), cache (on/off list). Throws InvalidArgument
// naming the field for an unknown name, a bad number, LO > HI, or a list with no value.
SearchSpace parse_bounds(const std::string& text);

// One point of the search is the engine's own engine::Tunables. Its algorithm is one name
// (or auto) while the tuner searches; a user's range text is kept as it is (the algorithm is
// then fixed).
using engine::Tunables;

// The one algorithm `t` runs at every size: kAuto for empty or range text.
comm::Algorithm algorithm_of(const Tunables& t);
// `t` running `a` at every size ("" for auto, which leaves the cost table in charge).
Tunables with_algorithm(Tunables t, comm::Algorithm a);

// Which settings were given (by name, in the agreed values): those stay as they are.
struct Fixed {
  bool algorithm = false, cache = false, fusion_threshold = false, cycle_time = false,
       segment_bytes = false, colors = false;
  static Fixed from(const SettingValues& given);
};

// The setting values that reproduce `t` (name, value text), leaving out the fixed ones: what the
// config file holds.
std::vector<std::pair<std::string, std::string>> setting_values(const Tunables& t,
                                                                const Fixed& fixed);
// For logs: "algorithm=ring cache=on fusion_threshold=4194304 ...".
std::string describe(const Tunables& t);

// Whether the algorithm uses the segment size / the colors (only then are they searched).
bool uses_segments(comm::Algorithm a);
bool uses_colors(comm::Algorithm a);

// The continuous dimensions searched for a given discrete choice, and the mapping to [0,1]^d.
enum class Dim { kFusionThreshold, kCycleTime, kSegmentBytes, kColors };
const char* dim_name(Dim d);
std::vector<Dim> continuous_dims(const SearchSpace& s, const Fixed& fixed, comm::Algorithm a);
std::vector<double> to_unit(const SearchSpace& s, const std::vector<Dim>& dims, const Tunables& c);
// Rounds to what the knobs hold: whole KiB for byte sizes, whole colors, 0.01 ms.
Tunables from_unit(const SearchSpace& s, const std::vector<Dim>& dims, const std::vector<double>& u,
                   Tunables base);

}  // namespace tune
}  // namespace tessera
