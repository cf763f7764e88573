#include "data/synthetic_shapes.h"

#include <algorithm>
#include <array>
#include <random>

#include "common/error.h"
#include "data/shape.h"

namespace tessera {
namespace data {

SyntheticShapes::SyntheticShapes(int64_t size, int64_t image_size, uint64_t seed)
    : size_(size), image_size_(image_size), seed_(seed) {
  TESSERA_CHECK(size > 0, "the synthetic data set needs at least one sample, got ", size);
  TESSERA_CHECK(image_size >= 16, "--image-size must be at least 16 for the synthetic shapes, got ",
                image_size);
}

void SyntheticShapes::render(int64_t index, float* image, int64_t* mask, int64_t* label) const {
  std::mt19937_64 rng(mix_seed(seed_ * 0x100000001b3ull ^ mix_seed(static_cast<uint64_t>(index))));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int64_t s = image_size_;
  // Colours are used rounded to float, as before the shapes were shared: bit for bit the same.
  const std::vector<Shape> shapes = random_shapes(rng, s);
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
          for (size_t ch = 0; ch < 3; ++ch) c[ch] = static_cast<float>(sh.color[ch]);
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
