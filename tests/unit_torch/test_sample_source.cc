// The pipeline's sample source on a real data set written by make-dataset: batches that do not
// depend on the number of workers or on which rank holds a sample, no file read after the first
// pass, decoded keeping equal to encoded, and the bad-input policy (corrupt files skipped, named
// and replaced; wrong mask sizes and labels are errors naming the file).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "common/atomic_file.h"
#include "data/dataset.h"
#include "data/image_codec.h"
#include "data/make_dataset.h"
#include "data/prefetcher.h"
#include "data/sample_source.h"

namespace tessera {
namespace data {
namespace {
namespace fs = std::filesystem;

std::string shapes(const std::string& name, int64_t size = 40) {
  MakeDatasetOptions o;
  o.out = (fs::path(::testing::TempDir()) / ("tessera_source_" + name)).string();
  fs::remove_all(o.out);
  o.size = size;
  o.image_size = 40;
  make_dataset(o);
  return o.out;
}

SourceOptions opts(bool train = true) {
  SourceOptions so;
  so.train = train;
  so.image_size = 32;
  so.seed = 11;
  so.quiet = true;
  return so;
}

void put(const std::string& path, const std::string& bytes) {
  write_file_atomically(path, bytes.data(), bytes.size());
}

std::vector<int64_t> all(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

std::vector<Batch> run(SampleSource& src, const std::vector<int64_t>& pos, int workers, int64_t b,
                       int64_t epoch) {
  const int64_t n = static_cast<int64_t>(pos.size()) / b;
  Prefetcher<Batch> p([&](int64_t k) { return src.make_batch(pos, k * b, b, epoch); }, workers, 2,
                      0, n, 60);
  std::vector<Batch> out;
  for (int64_t k = 0; k < n; ++k) out.push_back(p.next());
  return out;
}

void expect_same(const Batch& a, const Batch& b) {
  ASSERT_TRUE(torch::equal(a.images, b.images));
  ASSERT_TRUE(torch::equal(a.masks, b.masks));
}

TEST(SampleSource, BatchesDoNotDependOnWorkersOrOnTheRankHoldingTheSample) {
  const DataSet d = open_dataset(shapes("workers"), Format::kVoc, "train");
  SampleSource one(d, all(36), opts()), three(d, all(36), opts());
  const std::vector<int64_t> pos = all(36);
  const std::vector<Batch> a = run(one, pos, 1, 4, 0), b = run(three, pos, 3, 4, 0);
  ASSERT_EQ(a.size(), 9u);
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].images.sizes(), (std::vector<int64_t>{4, 3, 32, 32}));
    EXPECT_EQ(a[k].masks.sizes(), (std::vector<int64_t>{4, 32, 32}));
    expect_same(a[k], b[k]);
  }
  // Sample 9 held at position 1 of another shard: the same pixels in the same epoch.
  SampleSource other(d, {5, 9, 2, 30}, opts());
  const Batch x = one.make_batch(pos, 9, 1, 3), y = other.make_batch({0, 1, 2, 3}, 1, 1, 3);
  expect_same(x, y);
  // Another epoch draws another augmentation.
  EXPECT_FALSE(torch::equal(x.images, one.make_batch(pos, 9, 1, 4).images));
  // Labels stay labels: classes 0..3 and 255 where the crop padded.
  const torch::Tensor m = a[0].masks;
  EXPECT_TRUE((m.lt(4) | m.eq(255)).all().item<bool>());
}

TEST(SampleSource, SecondEpochReadsNoFile) {
  const DataSet d = open_dataset(shapes("reads"), Format::kVoc, "train");
  SampleSource src(d, all(36), opts());
  const std::vector<int64_t> pos = all(36);
  run(src, pos, 2, 5, 0);                 // 7 batches of 5: one sample left out
  EXPECT_GT(src.store().load_all(), 0u);  // the one left out
  const uint64_t read = src.store().file_bytes_read();
  const uint64_t before = process_read_bytes();
  run(src, pos, 2, 4, 1);
  run(src, pos, 3, 6, 2);
  const uint64_t after = process_read_bytes() - before;
  EXPECT_LT(after, 4096u) << after << " bytes read after the first pass";  // /proc/self/io only
  EXPECT_EQ(src.store().file_bytes_read(), read);
  EXPECT_EQ(src.store().memory_bytes(), read);  // encoded: what was read is what is held
}

TEST(SampleSource, KeepingDecodedPixelsGivesTheSameBatches) {
  const DataSet d = open_dataset(shapes("decoded"), Format::kVoc, "train");
  SourceOptions so = opts();
  SampleSource enc(d, all(36), so);
  so.keep_decoded = true;
  SampleSource dec(d, all(36), so);
  const std::vector<int64_t> pos = all(36);
  const std::vector<Batch> a = run(enc, pos, 2, 6, 0), b = run(dec, pos, 2, 6, 0);
  for (size_t k = 0; k < a.size(); ++k) expect_same(a[k], b[k]);
  // 36 x (40*40*3 + 40*40) pixels plus a 32-byte header each.
  EXPECT_EQ(dec.store().memory_bytes(), 36u * (40 * 40 * 4 + 64));
  EXPECT_LT(enc.store().memory_bytes(), dec.store().memory_bytes());
}

TEST(SampleSource, CorruptFilesAreSkippedNamedAndReplaced) {
  const std::string root = shapes("corrupt");
  const DataSet d = open_dataset(root, Format::kVoc, "train");
  // Sample 2's JPEG cut in half; sample 6's mask overwritten with junk.
  const std::string jpg = d.list.samples[2].image;
  std::vector<char> bytes = read_file(jpg);
  std::ofstream(jpg, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size() / 2);
  std::ofstream(d.list.samples[6].mask, std::ios::trunc) << "not a png at all";
  SampleSource src(d, all(36), opts());
  const std::vector<int64_t> pos = all(36);
  const Batch b0 = src.make_batch(pos, 0, 4, 0);
  ASSERT_EQ(b0.images.size(0), 4);  // the batch keeps its size
  // Samples 0, 1, then in 2's place the first sample after the batch (4), then 3.
  const Batch want = src.make_batch({0, 1, 4, 3}, 0, 4, 0);
  expect_same(b0, want);
  const Batch b1 = src.make_batch(pos, 4, 4, 0);  // 4 5 [6] 7: 6 replaced by 8
  expect_same(b1, src.make_batch({4, 5, 8, 7}, 0, 4, 0));
  const std::vector<CorruptSample> bad = src.corrupt();
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_EQ(bad[0].index, 2);
  EXPECT_NE(bad[0].reason.find(jpg), std::string::npos) << bad[0].reason;
  EXPECT_NE(bad[0].reason.find("truncated"), std::string::npos) << bad[0].reason;
  EXPECT_EQ(bad[1].index, 6);
  EXPECT_NE(bad[1].reason.find(d.list.samples[6].mask), std::string::npos) << bad[1].reason;
  // Evaluation leaves it out instead.
  SampleSource eval(d, all(36), opts(false));
  EXPECT_EQ(eval.make_batch(pos, 0, 4, 0).images.size(0), 3);
  // Marked from another rank: skipped without decoding.
  SampleSource fresh(d, all(36), opts());
  fresh.mark_corrupt({{1, "found elsewhere"}});
  expect_same(fresh.make_batch({0, 1, 3, 4, 5}, 0, 2, 0), fresh.make_batch({0, 3}, 0, 2, 0));
}

TEST(SampleSource, WrongMaskSizeAndLabelsAreErrorsNamingTheFile) {
  const std::string root = shapes("errors");
  const DataSet d = open_dataset(root, Format::kVoc, "train");
  put(d.list.samples[0].mask, encode_palette_png(torch::zeros({20, 40}, torch::kUInt8)));
  put(d.list.samples[1].mask, encode_palette_png(torch::full({40, 40}, 7, torch::kUInt8)));
  SampleSource src(d, all(36), opts());
  const std::vector<int64_t> pos = all(36);
  auto error_of = [&](size_t begin) -> std::string {
    try {
      src.make_batch(pos, begin, 1, 0);
    } catch (const CorruptImage&) {
      return "not expected: corrupt";
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  const std::string size = error_of(0);
  EXPECT_NE(size.find(d.list.samples[0].mask), std::string::npos) << size;
  EXPECT_NE(size.find("must have its image's size"), std::string::npos) << size;
  const std::string label = error_of(1);
  EXPECT_NE(label.find(d.list.samples[1].mask), std::string::npos) << label;
  EXPECT_NE(label.find("label 7"), std::string::npos) << label;
  EXPECT_NE(label.find("4 classes"), std::string::npos) << label;
  EXPECT_TRUE(src.corrupt().empty());  // errors, not corrupt samples
}

TEST(SampleSource, CityscapesLabelIdsBecomeTrainIds) {
  const fs::path root = fs::path(::testing::TempDir()) / "tessera_source_cityscapes";
  fs::remove_all(root);
  for (const char* split : {"train", "val"}) {
    fs::create_directories(root / "leftImg8bit" / split / "aachen");
    fs::create_directories(root / "gtFine" / split / "aachen");
    put((root / "leftImg8bit" / split / "aachen" / "a_000001_leftImg8bit.png").string(),
        encode_palette_png(torch::zeros({32, 32}, torch::kUInt8)));
    torch::Tensor ids = torch::full({32, 32}, 7, torch::kUInt8);  // road
    ids.narrow(0, 16, 16).fill_(26);                              // car
    ids[0][0] = 3;                                                // out of roi: ignored
    put((root / "gtFine" / split / "aachen" / "a_000001_gtFine_labelIds.png").string(),
        encode_palette_png(ids));
  }
  const DataSet d = open_dataset(root.string(), Format::kCityscapes, "val");
  EXPECT_EQ(d.num_classes, 19);
  SampleSource src(d, {0}, opts(false));
  const torch::Tensor m = src.make_batch({0}, 0, 1, 0).masks[0];
  EXPECT_EQ(m[0][0].item<int64_t>(), 255);
  EXPECT_EQ(m[1][1].item<int64_t>(), 0);    // road -> 0
  EXPECT_EQ(m[20][5].item<int64_t>(), 13);  // car -> 13
}

}  // namespace
}  // namespace data
}  // namespace tessera
