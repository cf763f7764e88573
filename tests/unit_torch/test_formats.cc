// Data-set layouts: each reader on a small tree the test writes, in order, with its errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "data/formats.h"

namespace tessera {
namespace data {
namespace {
namespace fs = std::filesystem;

fs::path fresh(const std::string& name) {
  fs::path p = fs::path(::testing::TempDir()) / ("tessera_formats_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void touch(const fs::path& p, const std::string& text = "x") {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(Formats, ClassFoldersSortedWithClassIndicesByFolderName) {
  const fs::path root = fresh("folder");
  touch(root / "zebra" / "b.png");
  touch(root / "zebra" / "a.JPG");
  touch(root / "ant" / "1.jpeg");
  touch(root / "ant" / "notes.txt");  // not an image: ignored
  SampleList l = list_folder(root.string());
  EXPECT_EQ(l.classes, (std::vector<std::string>{"ant", "zebra"}));
  ASSERT_EQ(l.samples.size(), 3u);
  EXPECT_EQ(l.samples[0].image, (root / "ant" / "1.jpeg").string());
  EXPECT_EQ(l.samples[0].label, 0);
  EXPECT_EQ(l.samples[1].image, (root / "zebra" / "a.JPG").string());
  EXPECT_EQ(l.samples[2].label, 1);
  touch(root / "empty" / "readme.txt");
  EXPECT_NE(error_of([&] { list_folder(root.string()); }).find("empty' holds no .jpg"),
            std::string::npos);
  EXPECT_NE(error_of([&] { list_folder((root / "nope").string()); }).find("is not a folder"),
            std::string::npos);
}

TEST(Formats, CsvManifestRelativePathsAndErrors) {
  const fs::path root = fresh("csv");
  touch(root / "img" / "a.png");
  touch(root / "img" / "b.png");
  touch(root / "m.csv", "path,label\nimg/a.png,2\n" + (root / "img" / "b.png").string() + ", 0\n");
  SampleList l = list_csv((root / "m.csv").string());
  ASSERT_EQ(l.samples.size(), 2u);
  EXPECT_EQ(l.samples[0].image, (root / "img" / "a.png").string());
  EXPECT_EQ(l.samples[0].label, 2);
  EXPECT_EQ(l.samples[1].label, 0);
  EXPECT_EQ(l.classes.size(), 3u);
  touch(root / "bad.csv", "img/a.png,two\n");
  EXPECT_NE(error_of([&] { list_csv((root / "bad.csv").string()); }).find("bad.csv:1: label 'two'"),
            std::string::npos);
  touch(root / "missing.csv", "img/c.png,1\n");
  EXPECT_NE(error_of([&] { list_csv((root / "missing.csv").string()); }).find("c.png' is missing"),
            std::string::npos);
}

TEST(Formats, VocSplitImagesAndMasks) {
  const fs::path root = fresh("voc");
  touch(root / "ImageSets" / "Segmentation" / "train.txt", "2007_000032\n2007_000039\n\n");
  for (const char* id : {"2007_000032", "2007_000039"}) {
    touch(root / "JPEGImages" / (std::string(id) + ".jpg"));
    touch(root / "SegmentationClass" / (std::string(id) + ".png"));
  }
  SampleList l = list_voc(root.string(), "train");
  ASSERT_EQ(l.samples.size(), 2u);
  EXPECT_EQ(l.samples[1].image, (root / "JPEGImages" / "2007_000039.jpg").string());
  EXPECT_EQ(l.samples[1].mask, (root / "SegmentationClass" / "2007_000039.png").string());
  EXPECT_NE(error_of([&] { list_voc(root.string(), "val"); }).find("val.txt' is missing"),
            std::string::npos);
  fs::remove(root / "SegmentationClass" / "2007_000039.png");
  EXPECT_NE(error_of([&] { list_voc(root.string(), "train"); }).find("2007_000039.png' is missing"),
            std::string::npos);
}

TEST(Formats, CityscapesPairsAndTrainIds) {
  const fs::path root = fresh("cityscapes");
  for (const char* city : {"bremen", "aachen"}) {
    const std::string stem = std::string(city) + "_000000_000019";
    touch(root / "leftImg8bit" / "train" / city / (stem + "_leftImg8bit.png"));
    touch(root / "gtFine" / "train" / city / (stem + "_gtFine_labelIds.png"));
  }
  SampleList l = list_cityscapes(root.string(), "train");
  ASSERT_EQ(l.samples.size(), 2u);
  EXPECT_NE(l.samples[0].image.find("aachen"), std::string::npos);  // sorted
  EXPECT_EQ(
      l.samples[0].mask,
      (root / "gtFine" / "train" / "aachen" / "aachen_000000_000019_gtFine_labelIds.png").string());
  // The official table: road 7 -> 0, sky 23 -> 10, bicycle 33 -> 18, unlabeled 0 -> 255,
  // license plate -1 -> 255; 19 train ids in all, each from exactly one label id.
  EXPECT_EQ(cityscapes_train_id(7), 0);
  EXPECT_EQ(cityscapes_train_id(23), 10);
  EXPECT_EQ(cityscapes_train_id(33), 18);
  EXPECT_EQ(cityscapes_train_id(0), 255);
  EXPECT_EQ(cityscapes_train_id(-1), 255);
  EXPECT_EQ(cityscapes_train_id(34), 255);
  std::vector<int> seen(kCityscapesClasses, 0);
  for (int id = -1; id < 40; ++id) {
    const uint8_t t = cityscapes_train_id(id);
    if (t != 255) ++seen[t];
  }
  for (int count : seen) EXPECT_EQ(count, 1);
  EXPECT_NE(error_of([&] { list_cityscapes(root.string(), "val"); }).find("is not a folder"),
            std::string::npos);
}

}  // namespace
}  // namespace data
}  // namespace tessera
