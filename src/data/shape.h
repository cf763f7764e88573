// Shared by the synthetic data sets (in memory and written as files): the seed mixer that makes
// sample i a pure function of (seed, i), and the three shapes they draw.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

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

}  // namespace data
}  // namespace tessera
