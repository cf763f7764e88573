#include "spatial/halo_plan.h"

#include "common/error.h"

namespace tessera {
namespace spatial {
namespace {

// On one axis, for neighbour offset d: the span of my block that neighbour needs, and where
// what it sends me lands in my extended buffer.
void spans(int d, int p, const std::vector<AxisTile>& tiles, int64_t* s0, int64_t* s1, int64_t* e0,
           int64_t* e1) {
  const AxisTile& me = tiles[static_cast<size_t>(p)];
  const int64_t block = me.in_hi - me.in_lo;
  if (d == 0) {
    *s0 = 0;
    *s1 = block;
    *e0 = me.halo_lo;
    *e1 = me.halo_lo + block;
  } else if (d < 0) {
    // The previous tile reads the first halo_hi of my inputs; my halo_lo comes from it.
    *s0 = 0;
    *s1 = p > 0 ? tiles[static_cast<size_t>(p - 1)].halo_hi : 0;
    *e0 = 0;
    *e1 = me.halo_lo;
  } else {
    *s0 = block -
          (p + 1 < static_cast<int>(tiles.size()) ? tiles[static_cast<size_t>(p + 1)].halo_lo : 0);
    *s1 = block;
    *e0 = me.halo_lo + block;
    *e1 = me.halo_lo + block + me.halo_hi;
  }
}

}  // namespace

HaloPlan plan_halos(int ph, int pw, int h, int w, const std::vector<AxisTile>& rows,
                    const std::vector<AxisTile>& cols) {
  TESSERA_CHECK(static_cast<int>(rows.size()) == ph && static_cast<int>(cols.size()) == pw,
                "plan_halos: ", rows.size(), "x", cols.size(), " tiles planned for a ", ph, "x", pw,
                " grid");
  TESSERA_CHECK(h >= 0 && h < ph && w >= 0 && w < pw, "tile (", h, ", ", w, ") is outside ", ph,
                "x", pw);
  HaloPlan plan;
  plan.row = &rows[static_cast<size_t>(h)];
  plan.col = &cols[static_cast<size_t>(w)];
  const int64_t bh = plan.row->in_hi - plan.row->in_lo, bw = plan.col->in_hi - plan.col->in_lo;
  plan.ext_rows = plan.row->halo_lo + bh + plan.row->halo_hi;
  plan.ext_cols = plan.col->halo_lo + bw + plan.col->halo_hi;
  plan.own =
      Rect{plan.row->halo_lo, plan.row->halo_lo + bh, plan.col->halo_lo, plan.col->halo_lo + bw};
  const GridShape g{1, ph, pw};
  const int me = h * pw + w;
  size_t k = 0;
  for (int dh = -1; dh <= 1; ++dh) {
    for (int dw = -1; dw <= 1; ++dw) {
      if (dh == 0 && dw == 0) continue;
      HaloRegion& r = plan.regions[k];
      r.dh = dh;
      r.dw = dw;
      r.peer = neighbour(g, me, dh, dw);
      // The neighbour sees me in the opposite direction, whose index is 7 - k.
      r.recv_tag = static_cast<int>(k);
      r.send_tag = 7 - static_cast<int>(k);
      if (r.peer >= 0) {
        spans(dh, h, rows, &r.send.r0, &r.send.r1, &r.recv.r0, &r.recv.r1);
        spans(dw, w, cols, &r.send.c0, &r.send.c1, &r.recv.c0, &r.recv.c1);
      }
      ++k;
    }
  }
  return plan;
}

}  // namespace spatial
}  // namespace tessera
