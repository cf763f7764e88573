// The pipelined multi-tree allreduce behind `dbtree` (2 trees) and `multicolor` (k trees).
//
// The vector is cut into one part per tree (chunk_range); tree t reduces and broadcasts part
// t, all trees at once. Because every rank is interior in at most one tree (color_trees), its
// links carry each byte at most once up and once down, and the trees' traffic spreads over
// different links. Each part travels in segments of at most segment_bytes.
//
// Iteration i of the loop (all receives of the iteration are posted first):
//   reduce:    for the trees where this rank is a leaf, send segment i of our input to the
//              parent; then, in the tree where it is interior, receive segment i from each
//              child, combine it with ours and send the sum to the parent (the root
//              finishes the segment: it divides for average and broadcasts it at once);
//   broadcast: in each tree, at depth d, receive segment i - 2d from the parent and pass it
//              to the children.
// The lag 2d grows with depth, so a segment that left the root has arrived by the time a rank
// waits for it and the loop runs at the pace of one segment per iteration, not one round trip
// of the tree. Leaf sends come before any interior wait, and a rank waits only for children
// in the same iteration and for parents at an earlier one, so no cycle of waits exists.
//
// Bytes sent per rank per tree part: at most 1 up + F down for interior, 1 up for leaves.
#include <algorithm>
#include <vector>

#include "comm/algorithms.h"
#include "comm/communicator.h"
#include "comm/p2p.h"
#include "comm/topology.h"
#include "common/error.h"
#include "common/reduce.h"

namespace tessera {
namespace comm {
namespace {
constexpr int kTagReduce = 100;
constexpr int kTagBroadcast = 200;
}  // namespace

void tree_allreduce(Communicator& comm, const AllreduceArgs& a, int trees, const char* what) {
  const int n = comm.size();
  const int r = comm.rank();
  const size_t esize = dtype_size(a.dtype);
  const size_t seg = std::max<size_t>(1, a.segment_bytes / esize);
  const ColorTrees shape = color_trees(n, trees);
  const int k = shape.colors;
  const char* src = static_cast<const char*>(a.send);
  char* dst = static_cast<char*>(a.recv);

  struct TreeState {
    TreeLinks links;
    Range part;
    size_t segments = 0;
    std::vector<int> up_send;  // request id of the reduce send of each segment (-1: none)
  };
  std::vector<TreeState> ts(static_cast<size_t>(k));
  int interior = -1;
  size_t max_segments = 0;
  int max_lag = 0;
  for (int t = 0; t < k; ++t) {
    TreeState& s = ts[static_cast<size_t>(t)];
    s.links = tree_links(n, trees, t, r);
    s.part = chunk_range(a.count, k, t);
    s.segments = (s.part.size() + seg - 1) / seg;
    s.up_send.assign(s.segments, -1);
    if (!s.links.children.empty()) interior = t;
    max_segments = std::max(max_segments, s.segments);
    max_lag = std::max(max_lag, 2 * s.links.depth);
  }
  auto segment = [&](const TreeState& s, size_t j) {
    Range g;
    g.begin = s.part.begin + j * seg;
    g.end = std::min(s.part.end, g.begin + seg);
    return g;
  };
  const size_t fanout = static_cast<size_t>(shape.fanout);
  char* child_buf = static_cast<char*>(comm.scratch(0, fanout * seg * esize));

  Requests reqs(comm, what, a.timeout_s);
  const long iterations = static_cast<long>(max_segments) + max_lag;
  for (long i = 0; i < iterations; ++i) {
    // Post this iteration's receives.
    std::vector<int> child_ids;
    if (interior >= 0) {
      const TreeState& s = ts[static_cast<size_t>(interior)];
      if (i < static_cast<long>(s.segments)) {
        const Range g = segment(s, static_cast<size_t>(i));
        for (size_t c = 0; c < s.links.children.size(); ++c) {
          child_ids.push_back(reqs.irecv(child_buf + c * seg * esize, g.size() * esize,
                                         s.links.children[c], kTagReduce + interior));
        }
      }
    }
    std::vector<int> down_ids(static_cast<size_t>(k), -1);
    for (int t = 0; t < k; ++t) {
      TreeState& s = ts[static_cast<size_t>(t)];
      const long j = i - 2 * s.links.depth;
      if (s.links.parent < 0 || j < 0 || j >= static_cast<long>(s.segments)) continue;
      // The segment's reduce send may still read this memory (in place): finish it first.
      if (s.up_send[static_cast<size_t>(j)] >= 0) reqs.wait(s.up_send[static_cast<size_t>(j)]);
      const Range g = segment(s, static_cast<size_t>(j));
      down_ids[static_cast<size_t>(t)] =
          reqs.irecv(dst + g.begin * esize, g.size() * esize, s.links.parent, kTagBroadcast + t);
    }
    // Reduce, leaves first: they wait for nobody.
    for (int t = 0; t < k; ++t) {
      TreeState& s = ts[static_cast<size_t>(t)];
      if (t == interior || i >= static_cast<long>(s.segments)) continue;
      const Range g = segment(s, static_cast<size_t>(i));
      if (s.links.parent >= 0) {
        s.up_send[static_cast<size_t>(i)] =
            reqs.isend(src + g.begin * esize, g.size() * esize, s.links.parent, kTagReduce + t);
      } else {
        // Root without children: only when n == 1, handled before we get here.
        TESSERA_ASSERT(false, "tree root without children");
      }
    }
    if (interior >= 0 && i < static_cast<long>(ts[static_cast<size_t>(interior)].segments)) {
      TreeState& s = ts[static_cast<size_t>(interior)];
      const Range g = segment(s, static_cast<size_t>(i));
      char* out = dst + g.begin * esize;
      const char* acc = src + g.begin * esize;
      for (size_t c = 0; c < child_ids.size(); ++c) {
        reqs.wait(child_ids[c]);
        reduce(a.dtype, a.op, acc, child_buf + c * seg * esize, out, g.size());
        acc = out;
      }
      if (s.links.parent >= 0) {
        s.up_send[static_cast<size_t>(i)] =
            reqs.isend(out, g.size() * esize, s.links.parent, kTagReduce + interior);
      } else {
        finish_average(a, n, out, g.size());
        for (int child : s.links.children) {
          reqs.isend(out, g.size() * esize, child, kTagBroadcast + interior);
        }
      }
    }
    // Broadcast: pass down what arrived from the parent.
    for (int t = 0; t < k; ++t) {
      const int id = down_ids[static_cast<size_t>(t)];
      if (id < 0) continue;
      reqs.wait(id);
      const TreeState& s = ts[static_cast<size_t>(t)];
      const Range g = segment(s, static_cast<size_t>(i - 2 * s.links.depth));
      for (int child : s.links.children) {
        reqs.isend(dst + g.begin * esize, g.size() * esize, child, kTagBroadcast + t);
      }
    }
  }
  reqs.wait_all();
}

}  // namespace comm
}  // namespace tessera
