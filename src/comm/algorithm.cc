#include "comm/algorithm.h"

#include "common/error.h"

namespace tessera {
namespace comm {

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto:
      return "auto";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kRhd:
      return "rhd";
    case Algorithm::kDbtree:
      return "dbtree";
    case Algorithm::kMulticolor:
      return "multicolor";
    case Algorithm::kHierarchical:
      return "hierarchical";
    case Algorithm::kMpi:
      return "mpi";
  }
  return "?";
}

Algorithm parse_algorithm(const std::string& name) {
  if (name == "auto") return Algorithm::kAuto;
  for (Algorithm a : all_algorithms()) {
    if (name == algorithm_name(a)) return a;
  }
  throw InvalidArgument("unknown allreduce algorithm '" + name +
                        "'; accepted: auto ring rhd dbtree multicolor hierarchical mpi");
}

const std::vector<Algorithm>& all_algorithms() {
  static const std::vector<Algorithm> all = {Algorithm::kRing,         Algorithm::kRhd,
                                             Algorithm::kDbtree,       Algorithm::kMulticolor,
                                             Algorithm::kHierarchical, Algorithm::kMpi};
  return all;
}

}  // namespace comm
}  // namespace tessera
