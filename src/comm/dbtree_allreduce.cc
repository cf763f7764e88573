// Double binary tree allreduce: two binary trees over the ranks, each carrying half of the
// vector, such that every rank is interior in at most one of them (color_trees(n, 2)). So
// each rank sends and receives about N bytes in each direction, like a ring, but a segment
// crosses only 2 log2 P links: the latency of a tree with the bandwidth of a ring.
//
//   P = 6:   tree 0        tree 1
//              0             3
//            1   2         4   5
//           3 4 5         0 1 2
//
// The pipelined executor is shared with multicolor (tree_allreduce.cc).
#include "comm/algorithms.h"

namespace tessera {
namespace comm {

void dbtree_allreduce(Communicator& comm, const AllreduceArgs& a) {
  tree_allreduce(comm, a, 2, "dbtree allreduce");
}

}  // namespace comm
}  // namespace tessera
