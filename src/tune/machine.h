// A machine for the cost model: nodes of ranks, the links within and between nodes, the
// reduction speed and the control plane's cost per request. Presets: `summit` (as Romero et
// al. and Anthony et al. describe it) and `local` (this machine, from the cost table that
// `tessera bench allreduce --calibrate` writes). Descriptions also come from JSON files; every
// field is checked and a bad one is named.
#pragma once

#include <string>

#include "comm/selector.h"

namespace tessera {
namespace tune {

struct Link {
  double latency_us = 0;  // per message
  double gbps = 0;        // GB/s per direction
};

struct Machine {
  std::string name;
  int nodes = 1;           // nodes available: at most nodes x ranks_per_node GPUs
  int ranks_per_node = 1;  // GPUs (ranks) per node
  Link intra;              // between two ranks of a node (NVLink; shared memory)
  Link shm;                // node-local shared-memory staging of `hierarchical` (local machines)
  Link inter;              // a node's injection into the network, all rails together
  int rails = 1;           // network adapters per node (inter.gbps is their sum)
  double reduce_gbps = 0;  // reduction kernel, bytes of input per second (GB/s)
  // Cores that run ranks on a node (0: a processor per rank). More ranks than cores share them,
  // which stretches every rank's copies and reductions (this machine's oversubscribed tests).
  int cores_per_node = 0;
  // What a synchronisation costs per rank beyond the cores (us): with more ranks than cores a
  // rank waits to be scheduled at every step that needs its peers (a context switch each).
  double switch_us = 0;
  // The coordinator's work per tensor request of one rank (decode, match, validate): the
  // control plane without the response cache costs ranks x tensors x this per step.
  double coordinator_us_per_request = 0;
  double spec_bytes = 64;  // bytes of one request on the wire
  // Relative spread (standard deviation / mean) of one GPU's compute time per step. A step waits
  // for the slowest of N GPUs, about sigma * sqrt(2 ln N) above the mean (stragglers, OS noise).
  // 0 in the presets: docs/scaling.md shows what a value does.
  double compute_jitter = 0;
  // What a node copies per second, all its ranks copying at once (GB/s): the engine's copies
  // into and out of the fusion buffer. 0: free.
  double node_copy_gbps = 0;
  // Machines whose ranks reduce in one shared memory (CPUs): the node's allreduce throughput,
  // bytes of every rank's vector per second, while the ranks' vectors fit in the last-level
  // cache (`cache_bytes` together) and beyond it. 0: not such a machine (the link formulas).
  double node_allreduce_gbps = 0;
  double cache_allreduce_gbps = 0;
  double cache_bytes = 0;
  // Pipelining parameters of the algorithms (the knobs' defaults).
  double segment_bytes = static_cast<double>(comm::kSegmentBytes.fallback);
  double shm_bytes = static_cast<double>(comm::kShmBytes.fallback);
  int colors = static_cast<int>(comm::kColors.fallback);
};

// "summit" or "local" (local reads `cost_table_path`, or the built-in table when empty).
// Throws InvalidArgument naming the preset and the ones that exist.
Machine machine_preset(const std::string& name, const std::string& cost_table_path = "");
// A JSON description: {"name", "nodes", "ranks_per_node", "intra": {"latency_us","gbps"},
// "inter": {...}, "rails", "reduce_gbps", ...}; "preset": NAME starts from a preset. Missing,
// non-numeric, negative or zero values are errors naming the field.
Machine machine_from_json(const std::string& text);
// The same checks for a machine built in code.
void validate(const Machine& m);
// The link parameters as the selector's cost table (for one node's formulas).
comm::CostTable cost_table_of(const Machine& m);

}  // namespace tune
}  // namespace tessera
