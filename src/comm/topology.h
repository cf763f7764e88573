// Pure topology functions: who talks to whom in each algorithm, as a function of (number of
// ranks, rank) only. Every rank computes the same plan without communicating; the unit tests
// check them exhaustively for n = 1..64.
#pragma once

#include <cstddef>
#include <vector>

namespace tessera {
namespace comm {

// Element range [begin, end) of part `index` when `count` elements are cut into `parts` parts
// whose sizes differ by at most one (the first count % parts parts are one larger).
struct Range {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
};
Range chunk_range(size_t count, int parts, int index);
// chunk_range in whole units of `unit` elements: every part begins at a multiple of `unit`, and
// the last part also takes the count % unit elements left over. The device IPC backend cuts
// with unit = 16 bytes of elements, so that every rank's chunk of a 16-byte-aligned buffer
// starts on a 16-byte boundary and its kernels load whole vectors (gpu/vector_plan.h).
Range aligned_chunk_range(size_t count, int parts, int index, size_t unit);

// Ring: rank r sends to (r + 1) % n and receives from (r + n - 1) % n.
inline int ring_next(int n, int r) { return (r + 1) % n; }
inline int ring_prev(int n, int r) { return (r + n - 1) % n; }

// One rank's place in one tree.
struct TreeLinks {
  int parent = -1;  // -1 at the root
  int depth = 0;    // edges from the root to this rank
  std::vector<int> children;
};

// k trees ("colors") over n ranks such that every rank is interior (has children) in at most
// one tree. Tree t is an F-ary heap laid over the ranks rotated by t * I, where I is the
// number of interior positions of an F-ary heap of n nodes; so tree t's interior ranks are
// the I consecutive ranks starting at t * I, disjoint from every other tree's because
// k * I <= n. F is the smallest fan-out >= 2 for which that holds.
//
//   n = 7, k = 2, F = 2, I = 3:      tree 0            tree 1
//                                      0                 3
//                                    1   2             4   5
//                                   3 4 5 6           6 0 1 2
//
// k is clamped to [1, n]. The double binary tree is color_trees(n, 2) (F = 2 for every n).
struct ColorTrees {
  int colors = 1;    // number of trees after clamping
  int fanout = 2;    // F
  int interior = 0;  // I
  int depth = 0;     // edges from the root to the deepest leaf
};
ColorTrees color_trees(int n, int k);
// Rank r's links in tree t of color_trees(n, k).
TreeLinks tree_links(int n, int k, int t, int r);
// Root rank of tree t.
int tree_root(int n, int k, int t);

// Recursive halving-doubling (Rabenseifner) for any n: the largest power of two p <= n takes
// part in the halving and doubling; the first 2 * (n - p) ranks pair up first, the even one
// of each pair handing its vector to the odd one and getting the result back at the end.
struct RhdPlan {
  int pof2 = 1;           // p
  int new_rank = -1;      // rank among the p participants; -1 for a rank that folds out
  int fold_partner = -1;  // the partner of the first/last exchange; -1 if none
  // Participant partners of the halving steps in order (mask p/2, p/4, ..., 1); the doubling
  // steps use them in reverse order. Empty for a folded-out rank.
  std::vector<int> partners;
};
RhdPlan rhd_plan(int n, int r);
// Real rank of participant q.
int rhd_real_rank(int n, int q);

}  // namespace comm
}  // namespace tessera
