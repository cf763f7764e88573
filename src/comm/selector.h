// Choosing an allreduce algorithm per message size: a size-range override from
// TESSERA_ALLREDUCE, a can_use predicate, and a cost table (alpha-beta-gamma formulas with
// this machine's parameters, or times measured by `tessera bench allreduce --calibrate`).
// Everything here is pure; every rank holds the same table and override (broadcast from rank 0
// at init), so every rank picks the same algorithm.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "comm/algorithm.h"
#include "comm/pipelining.h"

namespace tessera {
namespace comm {

// One "ALGO:LO-HI" clause; bytes, inclusive.
struct SizeRange {
  Algorithm algorithm = Algorithm::kAuto;
  size_t lo = 0;
  size_t hi = 0;
};

// Parses "ALGO" (every size) or "ALGO:LO-HI[;ALGO:LO-HI...]"; LO and HI are byte sizes with
// optional K/M/G suffixes, HI may be "max". Empty text gives no ranges. Throws InvalidArgument
// quoting the bad clause. Overlapping ranges are an error too: the first would silently win.
std::vector<SizeRange> parse_override(const std::string& text);

// What the selector needs to know about a communicator.
struct CommShape {
  int ranks = 1;
  int nodes = 1;
  int local_size = 1;
  bool uniform_nodes = true;
};

// Link parameters: time = alpha + bytes * beta (microseconds).
struct LinkCost {
  double alpha_us = 1.0;
  double beta_us_per_byte = 1.0 / 5000.0;
};

// Measured time of one algorithm at one (ranks, nodes) over message sizes.
struct MeasuredCurve {
  Algorithm algorithm = Algorithm::kRing;
  int ranks = 0;
  int nodes = 0;
  std::vector<std::pair<size_t, double>> points;  // (bytes, microseconds), ascending bytes
};

struct CostTable {
  LinkCost p2p{1.0, 1.0 / 5000.0};           // MPI point-to-point within a node
  LinkCost net{5.0, 1.0 / 1000.0};           // MPI point-to-point between nodes
  LinkCost shm{0.3, 1.0 / 15700.0};          // shared-memory step sync + copy per byte
  double reduce_us_per_byte = 1.0 / 8000.0;  // reduction kernel, per byte of input
  // What a node copies per second with every rank copying at once (GB/s, all ranks together;
  // 0: not measured). The simulator's cost of the engine's fusion-buffer copies.
  double node_copy_gbps = 0;
  // The pipelining the predictions assume: the communicator's settings (set at init).
  size_t segment_bytes = kSegmentBytes.fallback;
  size_t shm_bytes = kShmBytes.fallback;
  int colors = static_cast<int>(kColors.fallback);
  std::vector<MeasuredCurve> measured;
};

bool can_use(Algorithm a, const CommShape& shape);

// Predicted microseconds of one allreduce of `bytes` with algorithm `a` (measured curve if the
// table has one for this shape, else the formula of docs/algorithms.md).
double predict_us(const CostTable& table, Algorithm a, const CommShape& shape, size_t bytes);

// The algorithm to run: the override's range that holds `bytes` if any (refused with
// InvalidArgument if it cannot run on this shape), else the usable algorithm with the lowest
// predicted time.
Algorithm select_allreduce(const CostTable& table, const std::vector<SizeRange>& override_ranges,
                           const CommShape& shape, size_t bytes);

// Least-squares fit of y = alpha * a + beta * b over rows {a, b, y}; used by the calibration
// to recover link parameters from measured curves through each algorithm's formula. Throws
// InvalidArgument when the rows do not determine both parameters.
LinkCost fit_link(const std::vector<std::array<double, 3>>& rows);

// JSON (de)serialisation of the table; parse errors are InvalidArgument naming the field.
std::string cost_table_to_json(const CostTable& table);
CostTable cost_table_from_json(const std::string& text);

}  // namespace comm
}  // namespace tessera
