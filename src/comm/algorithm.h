// The allreduce algorithms and their names on the CLI and in TESSERA_ALLREDUCE.
#pragma once

#include <string>
#include <vector>

namespace tessera {
namespace comm {

enum class Algorithm { kAuto, kRing, kRhd, kDbtree, kMulticolor, kHierarchical, kMpi };

// "auto" "ring" "rhd" "dbtree" "multicolor" "hierarchical" "mpi".
const char* algorithm_name(Algorithm a);
// Throws InvalidArgument quoting `name` and listing the accepted names.
Algorithm parse_algorithm(const std::string& name);
// Every concrete algorithm (all but kAuto), in a fixed order.
const std::vector<Algorithm>& all_algorithms();

}  // namespace comm
}  // namespace tessera
