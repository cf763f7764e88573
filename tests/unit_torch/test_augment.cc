// Augmentations: shapes, normalisation, determinism from the generator, image and mask moved
// together (flip and crop keep every label on its own pixel), padding with the mean and 255,
// nearest-neighbour masks, and the size check.
#include <gtest/gtest.h>

#include <set>

#include "common/error.h"
#include "data/augment.h"

namespace tessera {
namespace data {
namespace {

// Image whose red channel is 10 x the mask's label at every pixel; labels vary in x and y.
std::pair<torch::Tensor, torch::Tensor> labelled(int64_t h, int64_t w) {
  torch::Tensor mask = torch::empty({h, w}, torch::kUInt8);
  torch::Tensor image = torch::zeros({h, w, 3}, torch::kUInt8);
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      const int label = static_cast<int>((3 * x + 7 * y) % 20);
      mask[y][x] = label;
      image[y][x][0] = 10 * label;
      image[y][x][1] = static_cast<int>(x);
    }
  }
  return {image, mask};
}

TEST(Augment, SegmentationMovesImageAndMaskTogether) {
  auto [image, mask] = labelled(40, 60);
  SegmentationAugment a;
  a.crop = 48;
  a.min_scale = a.max_scale = 1.0;  // no resampling: every pixel must keep its label exactly
  int flipped = 0, padded = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    std::mt19937_64 rng(seed);
    auto [x, m] = augment_segmentation(image, mask, a, rng, "s");
    ASSERT_EQ(x.sizes(), (std::vector<int64_t>{3, 48, 48}));
    ASSERT_EQ(m.sizes(), (std::vector<int64_t>{48, 48}));
    // Undo the normalisation of the red channel.
    torch::Tensor red = (x[0] * a.norm.std[0] + a.norm.mean[0]) * 255;
    torch::Tensor labelled_px = m != 255;
    EXPECT_TRUE(torch::allclose(red.masked_select(labelled_px),
                                (m.masked_select(labelled_px) * 10).to(torch::kFloat), 0, 0.01));
    // Padding: mask 255, image at the mean (0 after normalising).
    torch::Tensor pad = m == 255;
    if (pad.any().item<bool>()) {
      ++padded;
      EXPECT_EQ(x[0].masked_select(pad).abs().max().item<float>(), 0.0f);
    }
    // Green is x: decreasing along a row means flipped.
    const int64_t row = 20;
    torch::Tensor g = (x[1][row] * a.norm.std[1] + a.norm.mean[1]) * 255;
    if (m[row][0].item<int64_t>() != 255 && m[row][1].item<int64_t>() != 255 &&
        g[1].item<float>() < g[0].item<float>()) {
      ++flipped;
    }
  }
  EXPECT_GT(flipped, 5);  // about half of 40
  EXPECT_LT(flipped, 35);
  EXPECT_GT(padded, 0);  // the 40-row image is shorter than the 48 crop
}

TEST(Augment, SegmentationScalesWithNearestNeighbourMasks) {
  auto [image, fine] = labelled(64, 64);
  // Labels 0, 50, ..., 200: any blend of neighbours would invent a value between them.
  const torch::Tensor mask = (fine % 5) * 50;
  SegmentationAugment a;
  a.crop = 32;
  std::set<int64_t> input_labels;
  const torch::Tensor flat = mask.flatten().to(torch::kLong);
  for (int64_t i = 0; i < flat.numel(); ++i) input_labels.insert(flat[i].item<int64_t>());
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::mt19937_64 rng(seed);
    auto out = augment_segmentation(image, mask, a, rng, "s");
    torch::Tensor m = out.second.flatten();
    for (int64_t i = 0; i < m.numel(); ++i) {
      const int64_t v = m[i].item<int64_t>();
      ASSERT_TRUE(v == 255 || input_labels.count(v)) << "label " << v << " was invented";
    }
  }
  std::mt19937_64 r1(5), r2(5);
  EXPECT_TRUE(torch::equal(augment_segmentation(image, mask, a, r1, "s").first,
                           augment_segmentation(image, mask, a, r2, "s").first));
  try {
    std::mt19937_64 rng(0);
    augment_segmentation(image, mask.slice(0, 0, 10), a, rng, "2007_000032");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'2007_000032': the mask is [10, 64]"), std::string::npos)
        << e.what();
  }
}

TEST(Augment, SegmentationEvalIsACentreCrop) {
  auto [image, mask] = labelled(20, 30);
  SegmentationAugment a;
  a.crop = 16;
  auto [x, m] = eval_segmentation(image, mask, a, "e");
  EXPECT_TRUE(torch::equal(m, mask.slice(0, 2, 18).slice(1, 7, 23).to(torch::kLong)));
}

TEST(Augment, ClassificationShapesNormalisationAndDeterminism) {
  torch::Tensor grey = torch::full({50, 80, 3}, 128, torch::kUInt8);
  ClassificationAugment a;
  a.size = 32;
  std::mt19937_64 rng(1);
  torch::Tensor x = augment_classification(grey, a, rng);
  ASSERT_EQ(x.sizes(), (std::vector<int64_t>{3, 32, 32}));
  for (int c = 0; c < 3; ++c) {
    const float expect = (128.0f / 255.0f - a.norm.mean[c]) / a.norm.std[c];
    EXPECT_NEAR(x[c].min().item<float>(), expect, 1e-5);
    EXPECT_NEAR(x[c].max().item<float>(), expect, 1e-5);
  }
  auto [image, mask] = labelled(50, 80);
  std::mt19937_64 r1(9), r2(9), r3(10);
  torch::Tensor p = augment_classification(image, a, r1), q = augment_classification(image, a, r2);
  EXPECT_TRUE(torch::equal(p, q));
  EXPECT_FALSE(torch::equal(p, augment_classification(image, a, r3)));
  EXPECT_EQ(eval_classification(image, a).sizes(), (std::vector<int64_t>{3, 32, 32}));
}

}  // namespace
}  // namespace data
}  // namespace tessera
