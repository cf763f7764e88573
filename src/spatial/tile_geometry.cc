#include "spatial/tile_geometry.h"

#include <algorithm>
#include <sstream>

#include "common/error.h"

namespace tessera {
namespace spatial {
namespace {

// Plans into `out`; returns "" or the reason it cannot.
std::string plan(int64_t n, int parts, const WindowSpec& w, std::vector<AxisTile>* out) {
  std::ostringstream why;
  if (n % parts != 0) {
    why << n << " inputs do not divide into " << parts << " equal tiles";
    return why.str();
  }
  const int64_t m = window_output_size(n, w);
  if (m <= 0) {
    why << "the window (" << w.describe() << ") does not fit in " << n << " inputs";
    return why.str();
  }
  if (m % parts != 0) {
    why << "its " << m << " outputs do not divide into " << parts << " equal tiles";
    return why.str();
  }
  const int64_t block = n / parts, out_block = m / parts;
  const int64_t reach = w.dilation * (w.kernel - 1);
  std::vector<AxisTile> tiles;
  for (int p = 0; p < parts; ++p) {
    AxisTile t;
    t.in_lo = p * block;
    t.in_hi = t.in_lo + block;
    t.out_lo = p * out_block;
    t.out_hi = t.out_lo + out_block;
    const int64_t raw_lo = t.out_lo * w.stride - w.padding;
    const int64_t raw_hi = (t.out_hi - 1) * w.stride - w.padding + reach + 1;
    t.need_lo = std::max<int64_t>(raw_lo, 0);
    t.need_hi = std::min<int64_t>(raw_hi, n);
    t.pad_lo = t.need_lo - raw_lo;
    t.pad_hi = raw_hi - t.need_hi;
    t.halo_lo = std::max<int64_t>(0, t.in_lo - t.need_lo);
    t.halo_hi = std::max<int64_t>(0, t.need_hi - t.in_hi);
    t.skip_lo = std::max<int64_t>(0, t.need_lo - t.in_lo);
    t.skip_hi = std::max<int64_t>(0, t.in_hi - t.need_hi);
    if (t.halo_lo > block || t.halo_hi > block) {
      why << "tile " << p << " would need " << std::max(t.halo_lo, t.halo_hi)
          << " inputs from beyond its neighbour's tile of " << block;
      return why.str();
    }
    if (t.skip_lo + t.skip_hi >= block) {
      why << "tile " << p << " would read none of its own " << block << " inputs";
      return why.str();
    }
    // Padding belongs to the image border: an inner tile never pads.
    if ((t.pad_lo > 0 && p != 0) || (t.pad_hi > 0 && p != parts - 1)) {
      why << "tile " << p << " would pad inside the image";
      return why.str();
    }
    tiles.push_back(t);
  }
  if (out != nullptr) *out = std::move(tiles);
  return "";
}

}  // namespace

std::string WindowSpec::describe() const {
  std::ostringstream os;
  os << "kernel " << kernel << ", stride " << stride << ", dilation " << dilation << ", padding "
     << padding;
  return os.str();
}

int64_t window_output_size(int64_t n, const WindowSpec& w) {
  const int64_t span = n + 2 * w.padding - w.dilation * (w.kernel - 1) - 1;
  return span < 0 ? 0 : span / w.stride + 1;
}

std::string axis_problem(int64_t n, int parts, const WindowSpec& w) {
  if (n < 1 || parts < 1 || w.kernel < 1 || w.stride < 1 || w.dilation < 1 || w.padding < 0) {
    return "sizes, tiles, kernel, stride and dilation must be >= 1 and padding >= 0";
  }
  return plan(n, parts, w, nullptr);
}

std::vector<AxisTile> plan_axis(int64_t n, int parts, const WindowSpec& w,
                                const std::string& axis) {
  const std::string problem = axis_problem(n, parts, w);
  if (problem.empty()) {
    std::vector<AxisTile> tiles;
    plan(n, parts, w, &tiles);
    return tiles;
  }
  std::ostringstream os;
  os << "the image " << axis << " " << n << " over " << parts << " tiles for a layer with "
     << w.describe() << ": " << problem;
  // The nearest sizes that work, below and above.
  int64_t below = 0, above = 0;
  for (int64_t d = 1; d <= 4096 && (below == 0 || above == 0); ++d) {
    if (below == 0 && n - d >= 1 && axis_problem(n - d, parts, w).empty()) below = n - d;
    if (above == 0 && axis_problem(n + d, parts, w).empty()) above = n + d;
  }
  if (below != 0 || above != 0) {
    os << "; " << axis << "s that would work: ";
    if (below != 0) os << below;
    if (below != 0 && above != 0) os << " or ";
    if (above != 0) os << above;
  } else {
    os << "; use fewer tiles along the " << axis;
  }
  throw InvalidArgument(os.str());
}

}  // namespace spatial
}  // namespace tessera
