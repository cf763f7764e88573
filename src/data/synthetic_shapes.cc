#include "data/synthetic_shapes.h"

#include <algorithm>
#include <array>
#include <random>

#include "common/error.h"

namespace tessera {
namespace data {
namespace {

// SplitMix64: decorrelates the per-sample seeds (seed, index) fed to the generator.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Shape {
  int kind;  // 1 circle, 2 square, 3 triangle
  double cx, cy, r;
  std::array<float, 3> color;
  bool contains(double x, double y) const {
    const double dx = x - cx, dy = y - cy;
    switch (kind) {
      case 1:
        return dx * dx + dy * dy <= r * r;
      case 2:
        return std::abs(dx) <= r * 0.85 && std::abs(dy) <= r * 0.85;
      default: {
        // Upward triangle inscribed in the circle of radius r: below the two slanted edges and
        // above the base.
        if (dy > r * 0.5 || dy < -r) return false;
        const double half_width = (dy + r) / 1.5 * 0.866;
        return std::abs(dx) <= half_width;
      }
    }
  }
};

}  // namespace

SyntheticShapes::SyntheticShapes(int64_t size, int64_t image_size, uint64_t seed)
    : size_(size), image_size_(image_size), seed_(seed) {
  TESSERA_CHECK(size > 0, "the synthetic data set needs at least one sample, got ", size);
  TESSERA_CHECK(image_size >= 16, "--image-size must be at least 16 for the synthetic shapes, got ",
                image_size);
}

void SyntheticShapes::render(int64_t index, float* image, int64_t* mask, int64_t* label) const {
  std::mt19937_64 rng(mix(seed_ * 0x100000001b3ull ^ mix(static_cast<uint64_t>(index))));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int64_t s = image_size_;
  const int n_shapes = 1 + static_cast<int>(rng() % 3);
  std::vector<Shape> shapes;
  for (int k = 0; k < n_shapes; ++k) {
    Shape sh;
    sh.kind = 1 + static_cast<int>(rng() % 3);
    sh.r = s * (0.12 + 0.2 * unit(rng));
    sh.cx = sh.r + unit(rng) * (s - 2 * sh.r);
    sh.cy = sh.r + unit(rng) * (s - 2 * sh.r);
    for (float& c : sh.color) c = static_cast<float>(0.45 + 0.55 * unit(rng));
    shapes.push_back(sh);
  }
  // Largest first, so smaller shapes are painted over it and the label's shape stays visible.
  std::sort(shapes.begin(), shapes.end(), [](const Shape& a, const Shape& b) { return a.r > b.r; });
  *label = shapes.front().kind - 1;
  const std::array<float, 3> tint = {static_cast<float>(0.3 * unit(rng)),
                                     static_cast<float>(0.3 * unit(rng)),
                                     static_cast<float>(0.3 * unit(rng))};
  const size_t plane = static_cast<size_t>(s * s);
  for (int64_t y = 0; y < s; ++y) {
    for (int64_t x = 0; x < s; ++x) {
      const size_t p = static_cast<size_t>(y * s + x);
      int kind = 0;
      std::array<float, 3> c = tint;
      for (const Shape& sh : shapes) {
        if (sh.contains(x + 0.5, y + 0.5)) {
          kind = sh.kind;
          c = sh.color;
        }
      }
      mask[p] = kind;
      for (size_t ch = 0; ch < 3; ++ch) {
        const float noise = static_cast<float>(0.25 * unit(rng));
        image[ch * plane + p] = (c[ch] + noise - 0.5f) / 0.3f;
      }
    }
  }
}

Batch SyntheticShapes::get(const std::vector<int64_t>& indices) const {
  const int64_t n = static_cast<int64_t>(indices.size());
  Batch b;
  b.images = torch::empty({n, 3, image_size_, image_size_});
  b.masks = torch::empty({n, image_size_, image_size_}, torch::kLong);
  b.labels = torch::empty({n}, torch::kLong);
  const int64_t plane = image_size_ * image_size_;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = indices[static_cast<size_t>(k)];
    TESSERA_CHECK(i >= 0 && i < size_, "sample ", i, " is outside the data set of ", size_);
    render(i, b.images.data_ptr<float>() + k * 3 * plane, b.masks.data_ptr<int64_t>() + k * plane,
           b.labels.data_ptr<int64_t>() + k);
  }
  return b;
}

}  // namespace data
}  // namespace tessera
