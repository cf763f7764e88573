#include "spatial/take.h"

#include <atomic>
#include <chrono>

#include "comm/collectives.h"
#include "common/error.h"

namespace tessera {
namespace spatial {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Tags of the take's messages, apart from halo_exchange.cc's 0..15.
constexpr int kForwardTag = 64, kBackwardTag = 65;

bool is_run(const std::vector<int64_t>& idx) {
  for (size_t i = 1; i < idx.size(); ++i) {
    if (idx[i] != idx[0] + static_cast<int64_t>(i)) return false;
  }
  return true;
}

torch::Tensor index_of(const std::vector<int64_t>& idx, const torch::Device& device) {
  return torch::tensor(idx, torch::TensorOptions().dtype(torch::kLong)).to(device);
}

// t's rows (dim 2) or columns (dim 3) `idx`: a narrow (a view) when they are a run.
torch::Tensor pick(const torch::Tensor& t, int64_t dim, const std::vector<int64_t>& idx) {
  if (!idx.empty() && is_run(idx)) return t.narrow(dim, idx[0], static_cast<int64_t>(idx.size()));
  return t.index_select(dim, index_of(idx, t.device()));
}

// dst[rows, cols] += src, rows and cols distinct.
void add_at(torch::Tensor& dst, const std::vector<int64_t>& rows, const std::vector<int64_t>& cols,
            const torch::Tensor& src) {
  if (rows.empty() || cols.empty()) return;
  if (is_run(rows) && is_run(cols)) {
    dst.narrow(2, rows[0], static_cast<int64_t>(rows.size()))
        .narrow(3, cols[0], static_cast<int64_t>(cols.size()))
        .add_(src);
    return;
  }
  torch::Tensor wide = torch::zeros(
      {dst.size(0), dst.size(1), static_cast<int64_t>(rows.size()), dst.size(3)}, dst.options());
  wide.index_add_(3, index_of(cols, dst.device()), src);
  dst.index_add_(2, index_of(rows, dst.device()), wide);
}

// A map's per-output positions with -1 sent to `fill_at` (the fill row appended after the gather).
std::vector<int64_t> with_fill(const std::vector<int64_t>& pos, int64_t fill_at, bool* any) {
  std::vector<int64_t> v(pos);
  for (int64_t& p : v) {
    if (p < 0) {
      p = fill_at;
      *any = true;
    }
  }
  return v;
}

// Sends rows x cols of `from` to each of `out`'s peers and lands what `in`'s peers send in `into`
// (at r0..c1), through host memory (MPI's; a GPU's tiles are staged). `add`: add, not copy.
void move(comm::Communicator& comm, const torch::Tensor& from, const std::vector<TakeMessage>& out,
          const std::vector<TakeMessage>& in, torch::Tensor& into, int tag, bool add_to_rows) {
  std::vector<torch::Tensor> keep, got;
  std::vector<comm::PeerBuffer> sends, recvs;
  for (const TakeMessage& m : out) {
    keep.push_back(pick(pick(from, 2, m.rows), 3, m.cols).to(torch::kCPU).contiguous());
    sends.push_back(
        {m.peer, tag, keep.back().data_ptr(), static_cast<size_t>(keep.back().nbytes())});
  }
  for (const TakeMessage& m : in) {
    const int64_t r = add_to_rows ? static_cast<int64_t>(m.rows.size()) : m.r1 - m.r0;
    const int64_t c = add_to_rows ? static_cast<int64_t>(m.cols.size()) : m.c1 - m.c0;
    got.push_back(
        torch::empty({from.size(0), from.size(1), r, c}, from.options().device(torch::kCPU)));
    recvs.push_back({m.peer, tag, got.back().data_ptr(), static_cast<size_t>(got.back().nbytes())});
  }
  comm::exchange(comm, sends, recvs);
  for (size_t i = 0; i < in.size(); ++i) {
    const TakeMessage& m = in[i];
    const torch::Tensor t = got[i].to(into.device());
    if (add_to_rows) {
      add_at(into, m.rows, m.cols, t);
    } else {
      into.narrow(2, m.r0, m.r1 - m.r0).narrow(3, m.c0, m.c1 - m.c0).copy_(t);
    }
  }
}

std::vector<int64_t> range_of(int64_t lo, int64_t hi) {
  std::vector<int64_t> v;
  for (int64_t i = lo; i < hi; ++i) v.push_back(i);
  return v;
}

// A map as integers (the backward re-plans from it): in, tiles, each tile's length, the rows.
std::vector<int64_t> encode(const AxisMap& m) {
  std::vector<int64_t> v = {m.in, static_cast<int64_t>(m.src.size())};
  for (const auto& s : m.src) v.push_back(static_cast<int64_t>(s.size()));
  for (const auto& s : m.src) v.insert(v.end(), s.begin(), s.end());
  return v;
}

AxisMap decode(const std::vector<int64_t>& v) {
  AxisMap m;
  m.in = v[0];
  const auto tiles = static_cast<size_t>(v[1]);
  size_t at = 2 + tiles;
  for (size_t q = 0; q < tiles; ++q) {
    const auto len = static_cast<size_t>(v[2 + q]);
    m.src.emplace_back(v.begin() + static_cast<std::ptrdiff_t>(at),
                       v.begin() + static_cast<std::ptrdiff_t>(at + len));
    at += len;
  }
  return m;
}

std::atomic<int64_t> take_ns{0};

// Adds the time since `start` to the take's clock on leaving.
struct Clock {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ~Clock() {
    take_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::steady_clock::now() - start)
                   .count();
  }
};

// What a tile builds, seen from its gather: nr x nc gathered rows and columns, then one fill row
// and column when the maps name any (ur x uc in all); pr, pc: each built row's and column's place.
struct Built {
  int64_t nr, nc, ur, uc;
  std::vector<int64_t> pr, pc;
  explicit Built(const TakePlan& p)
      : nr(static_cast<int64_t>(p.row.needed.size())),
        nc(static_cast<int64_t>(p.col.needed.size())) {
    bool fill_r = false, fill_c = false;
    pr = with_fill(p.row.pos, nr, &fill_r);
    pc = with_fill(p.col.pos, nc, &fill_c);
    ur = nr + (fill_r ? 1 : 0);
    uc = nc + (fill_c ? 1 : 0);
  }
};

torch::Tensor gather(const torch::Tensor& x, const TakePlan& p, double fill,
                     comm::Communicator& c) {
  const Clock clock;
  const Built b(p);
  torch::Tensor u = torch::empty({x.size(0), x.size(1), b.ur, b.uc}, x.options());
  if (b.ur > b.nr) u.narrow(2, b.nr, 1).fill_(fill);
  if (b.uc > b.nc) u.narrow(3, b.nc, 1).fill_(fill);
  const TakeMessage& o = p.own;
  if (o.r1 > o.r0 && o.c1 > o.c0) {
    u.narrow(2, o.r0, o.r1 - o.r0)
        .narrow(3, o.c0, o.c1 - o.c0)
        .copy_(pick(pick(x, 2, o.rows), 3, o.cols));
  }
  move(c, x, p.sends, p.recvs, u, kForwardTag, false);
  return pick(pick(u, 2, b.pr), 3, b.pc).contiguous();
}

// The tile's gradient from the gradient of what it built: each built row's gradient added to its
// gathered row, the own block's share kept, the rest sent back to the owners, who add it.
torch::Tensor scatter_back(const torch::Tensor& g, const torch::Tensor& like, const TakePlan& p,
                           comm::Communicator& c) {
  const Clock clock;
  const Built b(p);
  // Built rows may repeat a gathered row (reflect padding, upsampling): index_add sums them.
  torch::Tensor rows = torch::zeros({g.size(0), g.size(1), b.ur, g.size(3)}, g.options());
  rows.index_add_(2, index_of(b.pr, g.device()), g);
  torch::Tensor u = torch::zeros({g.size(0), g.size(1), b.ur, b.uc}, g.options());
  u.index_add_(3, index_of(b.pc, g.device()), rows);
  torch::Tensor gx = torch::zeros_like(like);
  const TakeMessage& o = p.own;
  if (o.r1 > o.r0 && o.c1 > o.c0) {
    add_at(gx, o.rows, o.cols, u.narrow(2, o.r0, o.r1 - o.r0).narrow(3, o.c0, o.c1 - o.c0));
  }
  // Reversed: what this tile received goes back as runs of the gather; what it sent comes back.
  std::vector<TakeMessage> back;
  for (const TakeMessage& m : p.recvs) {
    TakeMessage b;
    b.peer = m.peer;
    b.rows = range_of(m.r0, m.r1);
    b.cols = range_of(m.c0, m.c1);
    back.push_back(std::move(b));
  }
  move(c, u, back, p.sends, gx, kBackwardTag, true);
  return gx;
}

struct Take : public torch::autograd::Function<Take> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor tile, std::vector<int64_t> rows,
                               std::vector<int64_t> cols, int64_t h, int64_t w, double fill,
                               comm::Communicator* comm) {
    const torch::Tensor x = tile.contiguous();
    const TakePlan plan =
        plan_take(decode(rows), decode(cols), static_cast<int>(h), static_cast<int>(w));
    ctx->saved_data["rows"] = rows;
    ctx->saved_data["cols"] = cols;
    ctx->saved_data["at"] = std::vector<int64_t>{h, w};
    ctx->saved_data["shape"] = x.sizes().vec();
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);  // the grid outlives the graph
    return gather(x, plan, fill, *comm);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const std::vector<int64_t> at = ctx->saved_data["at"].toIntVector();
    const TakePlan plan = plan_take(decode(ctx->saved_data["rows"].toIntVector()),
                                    decode(ctx->saved_data["cols"].toIntVector()),
                                    static_cast<int>(at[0]), static_cast<int>(at[1]));
    auto* comm = reinterpret_cast<comm::Communicator*>(ctx->saved_data["comm"].toInt());
    const torch::Tensor like =
        torch::empty(ctx->saved_data["shape"].toIntVector(), grads[0].options());
    return {scatter_back(grads[0].contiguous(), like, plan, *comm),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

double take_seconds() { return static_cast<double>(take_ns.load()) * 1e-9; }

torch::Tensor spatial_take(const torch::Tensor& tile, const AxisMap& rows, const AxisMap& cols,
                           int h, int w, double fill, comm::Communicator& spatial) {
  TESSERA_CHECK(tile.dim() == 4, "a spatial take takes [N, C, H, W] tiles, got ", tile.sizes());
  const int ph = static_cast<int>(rows.src.size()), pw = static_cast<int>(cols.src.size());
  TESSERA_CHECK(spatial.size() == ph * pw, "a ", ph, "x", pw,
                " take needs the spatial group's communicator, not one of ", spatial.size());
  const auto r = part_range(rows.in, ph, h), c = part_range(cols.in, pw, w);
  TESSERA_CHECK(tile.size(2) == r.second - r.first && tile.size(3) == c.second - c.first, "tile (",
                h, ", ", w, ") of a ", rows.in, "x", cols.in, " image over ", ph, "x", pw, " is ",
                r.second - r.first, "x", c.second - c.first, ", got ", tile.size(2), "x",
                tile.size(3));
  return Take::apply(tile, encode(rows), encode(cols), h, w, fill, &spatial);
}

}  // namespace spatial
}  // namespace tessera
