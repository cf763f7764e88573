// Shared by the synthetic data sets (in memory and written as files): the seed mixer that makes
// sample i a pure function of (seed, i), and the three shapes they draw.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace tessera {
namespace data {

// SplitMix64's finaliser: decorrelates seeds built from (seed, epoch, index) before they reach a
// generator.
inline uint64_t mix_seed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A circle (kind 1), square (2) or upward triangle (3) of "radius" r around (cx, cy).
struct Shape {
  int kind;
  double cx, cy, r;
  std::array<double, 3> color;
  bool contains(double x, double y) const {
    const double dx = x - cx, dy = y - cy;
    switch (kind) {
      case 1:
        return dx * dx + dy * dy <= r * r;
      case 2:
        return std::abs(dx) <= r * 0.85 && std::abs(dy) <= r * 0.85;
      default:
        // Inscribed in the circle of radius r: above the base, below the two slanted edges.
        if (dy > r * 0.5 || dy < -r) return false;
        return std::abs(dx) <= (dy + r) / 1.5 * 0.866;
    }
  }
};

// One to three random shapes inside an s x s image, largest first (so the smaller ones are
// painted over it and the label's shape stays visible). Draws from `rng` in a fixed order.
inline std::vector<Shape> random_shapes(std::mt19937_64& rng, int64_t s) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int n_shapes = 1 + static_cast<int>(rng() % 3);
  std::vector<Shape> shapes;
  for (int k = 0; k < n_shapes; ++k) {
    Shape sh;
    sh.kind = 1 + static_cast<int>(rng() % 3);
    sh.r = s * (0.12 + 0.2 * unit(rng));
    sh.cx = sh.r + unit(rng) * (s - 2 * sh.r);
    sh.cy = sh.r + unit(rng) * (s - 2 * sh.r);
    for (double& c : sh.color) c = 0.45 + 0.55 * unit(rng);
    shapes.push_back(sh);
  }
  std::sort(shapes.begin(), shapes.end(), [](const Shape& a, const Shape& b) { return a.r > b.r; });
  return shapes;
}

}  // namespace data
}  // namespace tessera
