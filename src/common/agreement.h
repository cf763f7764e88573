// What ranks disagree on, from each rank's description of something that must be the same
// everywhere (a model's parameters, a run's options). Pure: the gathering is done by the caller
// (tessera::verify_across_ranks in the libtorch API), so the wording is unit-tested.
#pragma once

#include <string>
#include <vector>

namespace tessera {

// `by_rank[r]` is rank r's description: lines "key: value" in a fixed order. Returns "" when
// every rank's is the same; otherwise one sentence per group of ranks that differs from rank 0's
// group, naming the first key that differs and both groups of ranks, e.g.
// "'conv1.weight' is [64, 3, 7, 7] f32 on ranks 0, 1 but [64, 3, 3, 3] f32 on ranks 2, 3".
std::string describe_disagreement(const std::vector<std::string>& by_rank);

// "0, 1, 2" (ranks in a message).
std::string rank_list(const std::vector<int>& ranks);

}  // namespace tessera
