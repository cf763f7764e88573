#include "spatial/take_plan.h"

#include <algorithm>

#include "common/error.h"

namespace tessera {
namespace spatial {
namespace {

// The distinct rows of a map, ascending, without the fill marker.
std::vector<int64_t> distinct(const std::vector<int64_t>& src) {
  std::vector<int64_t> v;
  v.reserve(src.size());
  for (int64_t r : src) {
    if (r >= 0) v.push_back(r);
  }
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// The run of the ascending `rows` inside [lo, hi).
std::pair<int64_t, int64_t> run_in(const std::vector<int64_t>& rows, int64_t lo, int64_t hi) {
  const auto a = std::lower_bound(rows.begin(), rows.end(), lo);
  const auto b = std::lower_bound(rows.begin(), rows.end(), hi);
  return {a - rows.begin(), b - rows.begin()};
}

}  // namespace

std::pair<int64_t, int64_t> part_range(int64_t n, int parts, int p) {
  return {n * p / parts, n * (p + 1) / parts};
}

AxisTake plan_axis_take(const AxisMap& map, int p, const std::string& axis) {
  const int parts = static_cast<int>(map.src.size());
  TESSERA_CHECK(parts >= 1 && p >= 0 && p < parts, "the ", axis, " map lists ", parts,
                " tiles; tile ", p, " has none");
  for (int q = 0; q < parts; ++q) {
    for (int64_t r : map.src[static_cast<size_t>(q)]) {
      TESSERA_CHECK(r >= -1 && r < map.in, "the ", axis, " map of tile ", q, " names row ", r,
                    " of an image of ", map.in, " (accepted: 0..", map.in - 1,
                    ", or -1 for the fill value)");
    }
  }
  AxisTake t;
  std::tie(t.in_lo, t.in_hi) = part_range(map.in, parts, p);
  const std::vector<int64_t>& mine = map.src[static_cast<size_t>(p)];
  t.needed = distinct(mine);
  t.pos.reserve(mine.size());
  for (int64_t r : mine) {
    t.pos.push_back(
        r < 0 ? -1 : std::lower_bound(t.needed.begin(), t.needed.end(), r) - t.needed.begin());
  }
  for (int q = 0; q < parts; ++q) {
    const auto q_range = part_range(map.in, parts, q);
    t.from.push_back(run_in(t.needed, q_range.first, q_range.second));
    const std::vector<int64_t> theirs = distinct(map.src[static_cast<size_t>(q)]);
    const auto in_me = run_in(theirs, t.in_lo, t.in_hi);
    std::vector<int64_t> offsets;
    for (int64_t i = in_me.first; i < in_me.second; ++i) {
      offsets.push_back(theirs[static_cast<size_t>(i)] - t.in_lo);
    }
    t.to.push_back(std::move(offsets));
  }
  return t;
}

TakePlan plan_take(const AxisMap& rows, const AxisMap& cols, int h, int w) {
  TakePlan plan;
  plan.row = plan_axis_take(rows, h, "height");
  plan.col = plan_axis_take(cols, w, "width");
  const int ph = static_cast<int>(rows.src.size()), pw = static_cast<int>(cols.src.size());
  for (int qh = 0; qh < ph; ++qh) {
    for (int qw = 0; qw < pw; ++qw) {
      TakeMessage send, recv;
      send.peer = recv.peer = qh * pw + qw;
      send.rows = plan.row.to[static_cast<size_t>(qh)];
      send.cols = plan.col.to[static_cast<size_t>(qw)];
      std::tie(recv.r0, recv.r1) = plan.row.from[static_cast<size_t>(qh)];
      std::tie(recv.c0, recv.c1) = plan.col.from[static_cast<size_t>(qw)];
      if (qh == h && qw == w) {
        plan.own = send;
        plan.own.r0 = recv.r0;
        plan.own.r1 = recv.r1;
        plan.own.c0 = recv.c0;
        plan.own.c1 = recv.c1;
        continue;
      }
      if (!send.rows.empty() && !send.cols.empty()) plan.sends.push_back(std::move(send));
      if (recv.r1 > recv.r0 && recv.c1 > recv.c0) plan.recvs.push_back(recv);
    }
  }
  return plan;
}

}  // namespace spatial
}  // namespace tessera
