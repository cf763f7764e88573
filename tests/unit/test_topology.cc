// Topology functions, exhaustively for n = 1..64 (and colors 1..8).
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "comm/topology.h"

namespace tessera {
namespace comm {
namespace {

TEST(ChunkRange, PartitionsEveryCountExactly) {
  for (size_t count : {0ul, 1ul, 7ul, 63ul, 64ul, 65ul, 1000003ul}) {
    for (int parts = 1; parts <= 64; ++parts) {
      size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        const Range r = chunk_range(count, parts, i);
        EXPECT_EQ(r.begin, next);
        EXPECT_LE(r.size(), count / parts + 1);
        EXPECT_GE(r.size(), count / parts);
        next = r.end;
      }
      EXPECT_EQ(next, count);
    }
  }
}

TEST(Ring, NextAndPrevAreInverse) {
  for (int n = 1; n <= 64; ++n) {
    std::set<int> seen;
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(ring_prev(n, ring_next(n, r)), r);
      seen.insert(ring_next(n, r));
    }
    EXPECT_EQ(static_cast<int>(seen.size()), n);  // a permutation: one cycle through all
    int r = 0, steps = 0;
    do {
      r = ring_next(n, r);
      ++steps;
    } while (r != 0);
    EXPECT_EQ(steps, n);
  }
}

// Every tree of color_trees(n, k): parent/children agree on every rank, the tree spans all
// ranks from its root without cycles, depths match, and each rank is interior in <= 1 tree.
TEST(ColorTrees, EveryRankAgreesAndIsInteriorAtMostOnce) {
  for (int n = 1; n <= 64; ++n) {
    for (int k = 1; k <= 8; ++k) {
      const ColorTrees shape = color_trees(n, k);
      ASSERT_GE(shape.colors, 1);
      ASSERT_LE(shape.colors, std::max(1, std::min(k, n)));
      std::vector<int> interior_count(n, 0);
      for (int t = 0; t < shape.colors; ++t) {
        std::vector<TreeLinks> links(n);
        for (int r = 0; r < n; ++r) links[r] = tree_links(n, k, t, r);
        int roots = 0;
        int max_depth = 0;
        for (int r = 0; r < n; ++r) {
          const TreeLinks& l = links[r];
          if (l.parent < 0) {
            ++roots;
            EXPECT_EQ(r, tree_root(n, k, t));
            EXPECT_EQ(l.depth, 0);
          } else {
            ASSERT_GE(l.parent, 0);
            ASSERT_LT(l.parent, n);
            const auto& siblings = links[l.parent].children;
            EXPECT_EQ(std::count(siblings.begin(), siblings.end(), r), 1)
                << "n " << n << " k " << k << " tree " << t << " rank " << r;
            EXPECT_EQ(l.depth, links[l.parent].depth + 1);
          }
          EXPECT_LE(static_cast<int>(l.children.size()), shape.fanout);
          for (int c : l.children) EXPECT_EQ(links[c].parent, r);
          if (!l.children.empty()) ++interior_count[r];
          max_depth = std::max(max_depth, l.depth);
        }
        EXPECT_EQ(roots, 1);
        EXPECT_EQ(max_depth, shape.depth) << "n " << n << " k " << k;
        // Spanning: walking up from every rank reaches the root in depth steps.
        for (int r = 0; r < n; ++r) {
          int x = r, steps = 0;
          while (links[x].parent >= 0 && steps <= n) {
            x = links[x].parent;
            ++steps;
          }
          EXPECT_EQ(x, tree_root(n, k, t));
        }
      }
      for (int r = 0; r < n; ++r) {
        EXPECT_LE(interior_count[r], 1) << "n " << n << " k " << k << " rank " << r;
      }
    }
  }
}

TEST(ColorTrees, DoubleBinaryTreeIsBinaryWithLogDepth) {
  for (int n = 2; n <= 64; ++n) {
    const ColorTrees shape = color_trees(n, 2);
    EXPECT_EQ(shape.colors, 2);
    EXPECT_EQ(shape.fanout, 2) << n;
    int log = 0;
    while ((1 << (log + 1)) <= n) ++log;
    EXPECT_EQ(shape.depth, log) << n;
  }
}

TEST(Rhd, PartnersArePairwiseAndCoverEveryRank) {
  for (int n = 1; n <= 64; ++n) {
    std::vector<RhdPlan> plans(n);
    for (int r = 0; r < n; ++r) plans[r] = rhd_plan(n, r);
    const int p = plans[0].pof2;
    EXPECT_LE(p, n);
    EXPECT_GT(2 * p, n);
    std::set<int> participants;
    for (int r = 0; r < n; ++r) {
      const RhdPlan& pl = plans[r];
      if (pl.fold_partner >= 0) {
        EXPECT_EQ(plans[pl.fold_partner].fold_partner, r);
        // Exactly one of a folded pair participates.
        EXPECT_NE(pl.new_rank < 0, plans[pl.fold_partner].new_rank < 0);
      }
      if (pl.new_rank < 0) continue;
      EXPECT_EQ(rhd_real_rank(n, pl.new_rank), r);
      participants.insert(pl.new_rank);
      ASSERT_EQ(static_cast<int>(pl.partners.size()), __builtin_ctz(static_cast<unsigned>(p)));
      for (size_t s = 0; s < pl.partners.size(); ++s) {
        const RhdPlan& other = plans[pl.partners[s]];
        ASSERT_GE(other.new_rank, 0);
        EXPECT_EQ(other.partners[s], r) << "n " << n << " step " << s;
        EXPECT_EQ(other.new_rank ^ pl.new_rank, p >> (s + 1));
      }
    }
    EXPECT_EQ(static_cast<int>(participants.size()), p);
  }
}

}  // namespace
}  // namespace comm
}  // namespace tessera
