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

struct TreeState {
  TreeLinks links;
  Range part;
  size_t segments = 0;
  std::vector<int> up_send;  // request id of the reduce send of each segment (-1: none)
};

// One rank's side of the pipelined trees; run() does the iterations described above.
class TreePipeline {
 public:
  TreePipeline(Communicator& comm, const AllreduceArgs& a, int trees, const char* what)
      : comm_(comm),
        a_(a),
        esize_(dtype_size(a.dtype)),
        seg_(std::max<size_t>(1, a.segment_bytes / esize_)),
        reqs_(comm, what, a.timeout_s) {
    const ColorTrees shape = color_trees(comm.size(), trees);
    ts_.resize(static_cast<size_t>(shape.colors));
    for (int t = 0; t < shape.colors; ++t) {
      TreeState& s = ts_[static_cast<size_t>(t)];
      s.links = tree_links(comm.size(), trees, t, comm.rank());
      s.part = chunk_range(a.count, shape.colors, t);
      s.segments = (s.part.size() + seg_ - 1) / seg_;
      s.up_send.assign(s.segments, -1);
      if (!s.links.children.empty()) interior_ = t;
      max_segments_ = std::max(max_segments_, s.segments);
      max_lag_ = std::max(max_lag_, 2 * s.links.depth);
    }
    child_buf_ =
        static_cast<char*>(comm.scratch(0, static_cast<size_t>(shape.fanout) * seg_ * esize_));
  }

  void run() {
    const long iterations = static_cast<long>(max_segments_) + max_lag_;
    for (long i = 0; i < iterations; ++i) {
      const std::vector<int> child_ids = post_child_receives(i);
      const std::vector<int> down_ids = post_parent_receives(i);
      send_leaf_segments(i);  // leaves first: they wait for nobody
      reduce_interior_segment(i, child_ids);
      pass_down(i, down_ids);
    }
    reqs_.wait_all();
  }

 private:
  Range segment(const TreeState& s, size_t j) const {
    Range g;
    g.begin = s.part.begin + j * seg_;
    g.end = std::min(s.part.end, g.begin + seg_);
    return g;
  }
  char* dst(const Range& g) const { return static_cast<char*>(a_.recv) + g.begin * esize_; }
  const char* src(const Range& g) const {
    return static_cast<const char*>(a_.send) + g.begin * esize_;
  }
  bool interior_has(long i) const {
    return interior_ >= 0 && i < static_cast<long>(ts_[static_cast<size_t>(interior_)].segments);
  }

  // Segment i from each child of the tree where this rank is interior.
  std::vector<int> post_child_receives(long i) {
    std::vector<int> ids;
    if (!interior_has(i)) return ids;
    const TreeState& s = ts_[static_cast<size_t>(interior_)];
    const Range g = segment(s, static_cast<size_t>(i));
    for (size_t c = 0; c < s.links.children.size(); ++c) {
      ids.push_back(reqs_.irecv(child_buf_ + c * seg_ * esize_, g.size() * esize_,
                                s.links.children[c], kTagReduce + interior_));
    }
    return ids;
  }

  // In each tree, segment i - 2 depth from the parent.
  std::vector<int> post_parent_receives(long i) {
    std::vector<int> ids(ts_.size(), -1);
    for (size_t t = 0; t < ts_.size(); ++t) {
      TreeState& s = ts_[t];
      const long j = i - 2 * s.links.depth;
      if (s.links.parent < 0 || j < 0 || j >= static_cast<long>(s.segments)) continue;
      // The segment's reduce send may still read this memory (in place): finish it first.
      if (s.up_send[static_cast<size_t>(j)] >= 0) reqs_.wait(s.up_send[static_cast<size_t>(j)]);
      const Range g = segment(s, static_cast<size_t>(j));
      ids[t] = reqs_.irecv(dst(g), g.size() * esize_, s.links.parent,
                           kTagBroadcast + static_cast<int>(t));
    }
    return ids;
  }

  void send_leaf_segments(long i) {
    for (size_t t = 0; t < ts_.size(); ++t) {
      TreeState& s = ts_[t];
      if (static_cast<int>(t) == interior_ || i >= static_cast<long>(s.segments)) continue;
      // Root without children: only when n == 1, handled before we get here.
      TESSERA_ASSERT(s.links.parent >= 0, "tree root without children");
      const Range g = segment(s, static_cast<size_t>(i));
      s.up_send[static_cast<size_t>(i)] =
          reqs_.isend(src(g), g.size() * esize_, s.links.parent, kTagReduce + static_cast<int>(t));
    }
  }

  // Combines segment i with the children's and sends it up; the root finishes it and starts
  // its broadcast.
  void reduce_interior_segment(long i, const std::vector<int>& child_ids) {
    if (!interior_has(i)) return;
    TreeState& s = ts_[static_cast<size_t>(interior_)];
    const Range g = segment(s, static_cast<size_t>(i));
    char* out = dst(g);
    const char* acc = src(g);
    for (size_t c = 0; c < child_ids.size(); ++c) {
      reqs_.wait(child_ids[c]);
      reduce(a_.dtype, a_.op, acc, child_buf_ + c * seg_ * esize_, out, g.size());
      acc = out;
    }
    if (s.links.parent >= 0) {
      s.up_send[static_cast<size_t>(i)] =
          reqs_.isend(out, g.size() * esize_, s.links.parent, kTagReduce + interior_);
      return;
    }
    finish_average(a_, comm_.size(), out, g.size());
    for (int child : s.links.children) {
      reqs_.isend(out, g.size() * esize_, child, kTagBroadcast + interior_);
    }
  }

  // Broadcast: pass down what arrived from the parent.
  void pass_down(long i, const std::vector<int>& down_ids) {
    for (size_t t = 0; t < ts_.size(); ++t) {
      if (down_ids[t] < 0) continue;
      reqs_.wait(down_ids[t]);
      const TreeState& s = ts_[t];
      const Range g = segment(s, static_cast<size_t>(i - 2 * s.links.depth));
      for (int child : s.links.children) {
        reqs_.isend(dst(g), g.size() * esize_, child, kTagBroadcast + static_cast<int>(t));
      }
    }
  }

  Communicator& comm_;
  const AllreduceArgs& a_;
  const size_t esize_;
  const size_t seg_;
  Requests reqs_;
  std::vector<TreeState> ts_;
  int interior_ = -1;
  size_t max_segments_ = 0;
  int max_lag_ = 0;
  char* child_buf_ = nullptr;
};

}  // namespace

void tree_allreduce(Communicator& comm, const AllreduceArgs& a, int trees, const char* what) {
  TreePipeline(comm, a, trees, what).run();
}

}  // namespace comm
}  // namespace tessera
