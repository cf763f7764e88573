// Whole-slide input: a tiled TIFF read a region at a time returns exactly the written pixels
// (across tile borders and at the slide's edges) and reads only the tiles it needs, proven with
// the process's read counter; bad regions and files are errors naming them; make-dataset slides
// writes slides whose classes differ at full resolution but not after 16x average pooling.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "data/dataset.h"
#include "data/make_dataset.h"
#include "data/shard_store.h"
#include "data/slide.h"

namespace tessera {
namespace data {
namespace {
namespace fs = std::filesystem;

uint8_t value(int64_t y, int64_t x, int64_t c) {
  // Incompressible-looking but known: every tile compresses to about the same size.
  uint64_t v = static_cast<uint64_t>(y) * 0x9e3779b97f4a7c15ull ^
               static_cast<uint64_t>(x) * 0xbf58476d1ce4e5b9ull ^
               static_cast<uint64_t>(c) * 0x94d049bb133111ebull;
  v ^= v >> 29;
  return static_cast<uint8_t>(v * 0x2545f4914f6cdd1dull >> 56);
}

std::string slide_path(const std::string& name) {
  return (fs::path(::testing::TempDir()) / ("tessera_slide_" + name + ".tif")).string();
}

void write(const std::string& path, int64_t h, int64_t w) {
  write_tiled_tiff(path, h, w, 256, [](int64_t y, int64_t x, int64_t th, int64_t tw, uint8_t* out) {
    for (int64_t r = 0; r < th; ++r)
      for (int64_t c = 0; c < tw; ++c)
        for (int64_t k = 0; k < 3; ++k) out[(r * tw + c) * 3 + k] = value(y + r, x + c, k);
  });
}

void expect_region(SlideReader& s, int64_t y, int64_t x, int64_t h, int64_t w) {
  const torch::Tensor t = s.read_region(y, x, h, w);
  ASSERT_EQ(t.sizes(), (std::vector<int64_t>{h, w, 3}));
  const uint8_t* p = t.data_ptr<uint8_t>();
  for (int64_t r = 0; r < h; ++r)
    for (int64_t c = 0; c < w; ++c)
      for (int64_t k = 0; k < 3; ++k)
        ASSERT_EQ(p[(r * w + c) * 3 + k], value(y + r, x + c, k)) << y + r << ", " << x + c;
}

TEST(Slide, RegionsHoldTheWrittenPixels) {
  const std::string path = slide_path("pixels");
  write(path, 1000, 700);  // edge tiles are partial on both axes
  SlideReader s(path);
  EXPECT_TRUE(s.tiled());
  EXPECT_EQ(s.height(), 1000);
  EXPECT_EQ(s.width(), 700);
  expect_region(s, 0, 0, 1000, 700);
  expect_region(s, 250, 250, 12, 12);  // across four tiles
  expect_region(s, 990, 690, 10, 10);  // the corner
  expect_region(s, 256, 512, 256, 188);
  try {
    s.read_region(900, 0, 200, 10);
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rows [900, 1100)"), std::string::npos) << m;
    EXPECT_NE(m.find("of 1000 x 700"), std::string::npos) << m;
    EXPECT_NE(m.find(path), std::string::npos) << m;
  }
}

TEST(Slide, ARankReadsOnlyItsTile) {
  const std::string path = slide_path("io");
  write(path, 2048, 2048);  // 64 tiles of 256
  const uint64_t file = fs::file_size(path);
  for (int64_t quarter = 0; quarter < 4; ++quarter) {
    const uint64_t before = process_read_bytes();
    SlideReader s(path);
    const torch::Tensor t = s.read_region((quarter / 2) * 1024, (quarter % 2) * 1024, 1024, 1024);
    const uint64_t read = process_read_bytes() - before;
    // A quarter of the tiles, plus the header and tile offsets (a few KiB).
    EXPECT_GT(read, file / 5) << "quarter " << quarter;
    EXPECT_LT(read, file / 4 + file / 16)
        << "quarter " << quarter << ": " << read << " of " << file;
    std::printf("[ slide ] quarter %lld: %llu of %llu bytes read (%.1f%%)\n",
                static_cast<long long>(quarter), static_cast<unsigned long long>(read),
                static_cast<unsigned long long>(file),
                100.0 * static_cast<double>(read) / static_cast<double>(file));
  }
}

TEST(Slide, BadFilesAreErrorsNamingThem) {
  EXPECT_THROW(SlideReader(slide_path("missing")), InvalidArgument);
  const std::string junk = slide_path("junk");
  std::ofstream(junk) << "II*\0 not really a tiff";
  try {
    SlideReader s(junk);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(junk), std::string::npos) << e.what();
  }
  EXPECT_THROW(write_tiled_tiff(slide_path("badtile"), 64, 64, 20, nullptr), InvalidArgument);
}

TEST(Slide, MakeDatasetSlidesNeedFullResolution) {
  MakeDatasetOptions o;
  o.kind = "slides";
  o.out = (fs::path(::testing::TempDir()) / "tessera_slides_set").string();
  fs::remove_all(o.out);
  o.size = 4;
  o.image_size = 512;
  make_dataset(o);
  const DataSet train = open_dataset(o.out, Format::kCsv, "train");
  ASSERT_EQ(train.list.samples.size(), 2u);
  EXPECT_EQ(train.list.classes, (std::vector<std::string>{"squares", "crosses"}));
  EXPECT_EQ(train.list.samples[0].label, 0);
  EXPECT_EQ(train.list.samples[1].label, 1);
  SlideReader s(train.list.samples[1].image);
  std::vector<uint8_t> want(512 * 512 * 3);
  render_slide_tile(o.seed, 1, 1, 0, 0, 512, 512, want.data());
  const torch::Tensor got = s.read_region(0, 0, 512, 512);
  ASSERT_EQ(std::memcmp(got.data_ptr<uint8_t>(), want.data(), want.size()), 0);
  // The same slide drawn with squares instead of crosses: many pixels differ at full resolution,
  // but 16x average pooling leaves the same dark mass per block (up to blobs that straddle a
  // block border) and the noise.
  std::vector<uint8_t> other(want.size());
  render_slide_tile(o.seed, 1, 0, 0, 0, 512, 512, other.data());
  auto tensor = [](std::vector<uint8_t>& v) {
    return torch::from_blob(v.data(), {512, 512, 3}, torch::kUInt8).to(torch::kFloat);
  };
  const torch::Tensor a = tensor(want), b = tensor(other);
  EXPECT_GT((a - b).abs().sum(-1).gt(0).sum().item<int64_t>(), 200);
  auto pool = [](const torch::Tensor& t) {
    return torch::avg_pool2d(t.permute({2, 0, 1}).unsqueeze(0), 16);
  };
  const double pooled = (pool(a) - pool(b)).abs().mean().item<double>();
  EXPECT_LT(pooled, 1.0) << pooled;
  std::printf("[ slides ] 16x pooled mean difference between the classes: %.3f levels\n", pooled);
}

}  // namespace
}  // namespace data
}  // namespace tessera
