// The cost model of one allreduce on a Machine, per algorithm: on one node the selector's own
// alpha-beta-gamma formulas (docs/algorithms.md) with the machine's links; across nodes the same
// algorithms with the network's contention made explicit (a node's ranks share its injection
// bandwidth; rings cross it once per node). Pure.
#pragma once

#include <vector>

#include "comm/algorithm.h"
#include "tune/machine.h"

namespace tessera {
namespace tune {

// Seconds of one allreduce of `bytes` over `gpus` ranks (packed ranks_per_node to a node) with
// algorithm `a`; kAuto: the fastest usable one. 0 for one rank or no bytes.
double allreduce_seconds(const Machine& m, comm::Algorithm a, int gpus, double bytes);
// The algorithm kAuto stands for at this size.
comm::Algorithm best_algorithm(const Machine& m, int gpus, double bytes);
// The concrete algorithms the model knows (auto's candidates).
const std::vector<comm::Algorithm>& modelled_algorithms();

// Seconds the engine spends copying `bytes` into a fusion buffer and out again (0 for a
// buffer of one tensor, which is reduced in place: the caller decides).
double fusion_copy_seconds(const Machine& m, int gpus, double bytes);

// Seconds one negotiation cycle costs on the critical path: the bit-vector vote (an allreduce of
// a few words), plus, without the response cache, the coordinator round for `requests` new
// tensor requests of every rank (all ranks' specs gathered and decoded).
double negotiation_seconds(const Machine& m, int gpus, int requests, int cached_tensors,
                           bool cache);

}  // namespace tune
}  // namespace tessera
