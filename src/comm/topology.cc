#include "comm/topology.h"

#include <algorithm>

#include "common/error.h"

namespace tessera {
namespace comm {

Range chunk_range(size_t count, int parts, int index) {
  TESSERA_ASSERT(parts > 0 && index >= 0 && index < parts);
  const size_t p = static_cast<size_t>(parts);
  const size_t i = static_cast<size_t>(index);
  const size_t base = count / p;
  const size_t extra = count % p;
  Range r;
  r.begin = i * base + std::min(i, extra);
  r.end = r.begin + base + (i < extra ? 1 : 0);
  return r;
}

Range aligned_chunk_range(size_t count, int parts, int index, size_t unit) {
  TESSERA_ASSERT(unit > 0);
  const Range units = chunk_range(count / unit, parts, index);
  Range r{units.begin * unit, units.end * unit};
  if (index == parts - 1) r.end = count;
  return r;
}

namespace {
int ceil_div(int a, int b) { return (a + b - 1) / b; }
}  // namespace

ColorTrees color_trees(int n, int k) {
  TESSERA_ASSERT(n >= 1);
  ColorTrees c;
  c.colors = std::max(1, std::min(k, n));
  if (n == 1) {
    c.fanout = 2;
    c.interior = 0;
    c.depth = 0;
    return c;
  }
  int f = 2;
  while (c.colors * ceil_div(n - 1, f) > n) ++f;  // ends at f = n - 1 at the latest
  c.fanout = f;
  c.interior = ceil_div(n - 1, f);
  // Depth of an f-ary heap with n nodes: the level of position n - 1.
  int depth = 0;
  for (long p = n - 1; p > 0; p = (p - 1) / f) ++depth;
  c.depth = depth;
  return c;
}

int tree_root(int n, int k, int t) {
  const ColorTrees c = color_trees(n, k);
  return static_cast<int>((static_cast<long>(t) * c.interior) % n);
}

TreeLinks tree_links(int n, int k, int t, int r) {
  const ColorTrees c = color_trees(n, k);
  TESSERA_ASSERT(t >= 0 && t < c.colors && r >= 0 && r < n);
  const int shift = static_cast<int>((static_cast<long>(t) * c.interior) % n);
  const int pos = (r - shift + n) % n;
  TreeLinks links;
  if (pos > 0) links.parent = ((pos - 1) / c.fanout + shift) % n;
  for (long p = pos; p > 0; p = (p - 1) / c.fanout) ++links.depth;
  for (int j = 1; j <= c.fanout; ++j) {
    const long child = static_cast<long>(pos) * c.fanout + j;
    if (child >= n) break;
    links.children.push_back(static_cast<int>((child + shift) % n));
  }
  return links;
}

RhdPlan rhd_plan(int n, int r) {
  TESSERA_ASSERT(n >= 1 && r >= 0 && r < n);
  RhdPlan plan;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  plan.pof2 = p;
  const int rem = n - p;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      plan.fold_partner = r + 1;
      return plan;  // folds out
    }
    plan.fold_partner = r - 1;
    plan.new_rank = r / 2;
  } else {
    plan.new_rank = r - rem;
  }
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    plan.partners.push_back(rhd_real_rank(n, plan.new_rank ^ mask));
  }
  return plan;
}

int rhd_real_rank(int n, int q) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;
  return q < rem ? 2 * q + 1 : q + rem;
}

}  // namespace comm
}  // namespace tessera
