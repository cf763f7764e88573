// make-dataset: the files it writes are read back by the real readers and decoders and hold
// exactly what was rendered (masks bit for bit, JPEG images within JPEG's error), with the
// layouts' class lists and splits; the same seed writes the same bytes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/atomic_file.h"
#include "data/dataset.h"
#include "data/image_codec.h"
#include "data/make_dataset.h"

namespace tessera {
namespace data {
namespace {
namespace fs = std::filesystem;

std::string bytes_of(const std::string& path) {
  std::vector<char> b = read_file(path);
  return std::string(b.begin(), b.end());
}

MakeDatasetOptions options(const std::string& kind, const std::string& name) {
  MakeDatasetOptions o;
  o.kind = kind;
  o.out = (fs::path(::testing::TempDir()) / ("tessera_make_" + name)).string();
  fs::remove_all(o.out);
  o.size = 40;
  o.image_size = 48;
  o.seed = 7;
  return o;
}

TEST(MakeDataset, ShapesIsAVocDataSetHoldingWhatWasRendered) {
  const MakeDatasetOptions o = options("shapes", "shapes");
  const MakeDatasetResult r = make_dataset(o);
  EXPECT_EQ(r.train, 36);
  EXPECT_EQ(r.val, 4);
  const DataSet train = open_dataset(o.out, Format::kVoc, "train");
  const DataSet val = open_dataset(o.out, Format::kVoc, "val");
  ASSERT_EQ(train.list.samples.size(), 36u);
  ASSERT_EQ(val.list.samples.size(), 4u);
  EXPECT_TRUE(train.segmentation);
  EXPECT_EQ(train.num_classes, 4);  // classes.txt, not VOC's 21
  EXPECT_EQ(train.list.classes[3], "triangle");
  std::set<int> kinds;
  for (int64_t i = 0; i < 40; ++i) {
    const Sample& s = i < 36 ? train.list.samples[static_cast<size_t>(i)]
                             : val.list.samples[static_cast<size_t>(i - 36)];
    const RenderedSample want = render_textured_shapes(o.seed, i, o.image_size);
    const torch::Tensor mask = decode_mask(bytes_of(s.mask), s.mask);
    ASSERT_TRUE(torch::equal(mask, want.mask)) << s.mask;
    const torch::Tensor image = decode_image(bytes_of(s.image), s.image);
    ASSERT_EQ(image.sizes(), want.image.sizes());
    // JPEG drops the rendered pixel noise (uniform, +-25 levels) but keeps the picture: compare
    // means over 4x4 blocks.
    auto blocks = [](const torch::Tensor& rgb) {
      return torch::avg_pool2d(rgb.permute({2, 0, 1}).unsqueeze(0).to(torch::kFloat), 4);
    };
    const double err = (blocks(image) - blocks(want.image)).abs().mean().item<double>();
    EXPECT_LT(err, 4.0) << s.image;
    for (int v : {1, 2, 3}) {
      if (mask.eq(v).any().item<bool>()) kinds.insert(v);
    }
  }
  EXPECT_EQ(kinds, (std::set<int>{1, 2, 3}));  // every shape occurs
  // The same seed writes the same bytes; another seed other images.
  MakeDatasetOptions again = options("shapes", "shapes_again");
  make_dataset(again);
  EXPECT_EQ(bytes_of(o.out + "/JPEGImages/000005.jpg"),
            bytes_of(again.out + "/JPEGImages/000005.jpg"));
  EXPECT_FALSE(
      torch::equal(render_textured_shapes(8, 5, 48).image, render_textured_shapes(7, 5, 48).image));
}

TEST(MakeDataset, ClassesFoldersAndManifestsAgree) {
  const MakeDatasetOptions o = options("classes", "classes");
  make_dataset(o);
  const DataSet folder = open_dataset(o.out, Format::kFolder, "train");
  const DataSet csv = open_dataset(o.out, Format::kCsv, "train");
  EXPECT_EQ(folder.list.classes, (std::vector<std::string>{"circle", "square", "triangle"}));
  EXPECT_EQ(csv.list.classes, folder.list.classes);  // classes.txt
  ASSERT_EQ(folder.list.samples.size(), 36u);
  ASSERT_EQ(csv.list.samples.size(), 36u);
  std::map<std::string, int64_t> by_path;
  for (const Sample& s : folder.list.samples)
    by_path[fs::path(s.image).lexically_normal().string()] = s.label;
  int jpeg = 0, png = 0;
  for (const Sample& s : csv.list.samples) {
    const std::string p = fs::path(s.image).lexically_normal().string();
    ASSERT_EQ(by_path.count(p), 1u) << p;
    EXPECT_EQ(by_path[p], s.label) << p;
    const int64_t index = std::stoll(fs::path(p).stem().string());
    EXPECT_EQ(s.label, index % 3) << p;
    EXPECT_EQ(s.label, render_textured_shapes(o.seed, index, o.image_size, s.label + 1).label);
    (fs::path(p).extension() == ".jpg" ? jpeg : png)++;
    decode_image(bytes_of(p), p);  // both kinds decode
  }
  EXPECT_GT(jpeg, 0);
  EXPECT_GT(png, 0);
  EXPECT_EQ(open_dataset(o.out, Format::kFolder, "val").list.samples.size(), 4u);
}

TEST(MakeDataset, BadOptionsAreErrors) {
  MakeDatasetOptions o = options("shapes", "bad");
  o.kind = "cats";
  EXPECT_THROW(make_dataset(o), InvalidArgument);
  o = options("shapes", "bad");
  o.size = 1;
  EXPECT_THROW(make_dataset(o), InvalidArgument);
  o = options("shapes", "bad");
  o.image_size = 8;
  EXPECT_THROW(make_dataset(o), InvalidArgument);
  try {
    open_dataset(o.out + "/nothing", Format::kVoc, "train");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("nothing"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_format("coco"), InvalidArgument);
}

}  // namespace
}  // namespace data
}  // namespace tessera
