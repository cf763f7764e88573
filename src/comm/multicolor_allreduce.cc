// Multi-color allreduce (Kumar et al., 2017): the vector is split into k colors, each reduced
// and broadcast along its own tree; every rank is interior in at most one tree
// (color_trees(n, k)), so the k trees use disjoint sets of forwarding ranks and their traffic
// runs concurrently. k comes from TESSERA_COLORS (default 4); k = 2 with fan-out 2 is the
// double binary tree. With more colors each tree's fan-out grows (F is the smallest fan-out
// with k * ceil((P - 1) / F) <= P), trading depth for width.
//
// The pipelined executor is shared with dbtree (tree_allreduce.cc).
#include "comm/algorithms.h"

namespace tessera {
namespace comm {

void multicolor_allreduce(Communicator& comm, const AllreduceArgs& a) {
  tree_allreduce(comm, a, a.colors, "multicolor allreduce");
}

}  // namespace comm
}  // namespace tessera
