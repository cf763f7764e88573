// The in-memory sharded store: a deterministic partition by rank, each file read once (also
// under concurrent workers), and no file bytes read at all from the second pass on, proven with
// the process's own read counter.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "common/error.h"
#include "data/shard_store.h"

namespace tessera {
namespace data {
namespace {
namespace fs = std::filesystem;

constexpr size_t kFileBytes = 20000;

SampleList write_tree(const std::string& name, int files) {
  const fs::path root = fs::path(::testing::TempDir()) / ("tessera_store_" + name);
  fs::remove_all(root);
  fs::create_directories(root / "cls");
  for (int i = 0; i < files; ++i) {
    std::ofstream f(root / "cls" / ("img" + std::to_string(100 + i) + ".png"), std::ios::binary);
    f << std::string(kFileBytes, static_cast<char>('a' + i % 26));
  }
  return list_folder(root.string());
}

TEST(ShardedStore, PartitionIsDeterministicAndCoversTheList) {
  const SampleList list = write_tree("partition", 11);
  std::set<std::string> seen;
  for (int r = 0; r < 3; ++r) {
    ShardedStore s(list, r, 3);
    EXPECT_EQ(s.size(), r < 2 ? 4u : 3u);
    for (size_t i = 0; i < s.size(); ++i) {
      EXPECT_EQ(s.sample(i).image, list.samples[s.global_index(i)].image);
      EXPECT_TRUE(seen.insert(s.sample(i).image).second);
    }
  }
  EXPECT_EQ(seen.size(), 11u);
  EXPECT_THROW(ShardedStore(list, 11, 12), InvalidArgument);  // rank 11 would hold nothing
  EXPECT_THROW(ShardedStore(list, 3, 3), InvalidArgument);    // not a rank
  EXPECT_THROW(ShardedStore(list, std::vector<int64_t>{1, 4, 1}), InvalidArgument);  // twice
  EXPECT_THROW(ShardedStore(list, std::vector<int64_t>{11}), InvalidArgument);       // outside
}

TEST(ShardedStore, SecondPassReadsNoFile) {
  const SampleList list = write_tree("reads", 12);
  ShardedStore s(list, 1, 2);
  const uint64_t before = process_read_bytes();
  for (size_t i = 0; i < s.size(); ++i) {
    const std::string& b = s.image_bytes(i);
    ASSERT_EQ(b.size(), kFileBytes);
    EXPECT_EQ(b[0], static_cast<char>('a' + s.global_index(i) % 26));
  }
  const uint64_t first = process_read_bytes() - before;
  EXPECT_GE(first, s.size() * kFileBytes);
  EXPECT_EQ(s.file_bytes_read(), s.size() * kFileBytes);
  EXPECT_EQ(s.memory_bytes(), s.size() * kFileBytes);
  const uint64_t mid = process_read_bytes();
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (size_t i = 0; i < s.size(); ++i) ASSERT_EQ(s.image_bytes(i).size(), kFileBytes);
  }
  // Only the read of /proc/self/io itself (a few hundred bytes); one file would be 20,000.
  const uint64_t later = process_read_bytes() - mid;
  EXPECT_LT(later, 4096u) << later << " bytes read after the first pass";
  EXPECT_EQ(s.file_bytes_read(), s.size() * kFileBytes);
}

TEST(ShardedStore, ConcurrentWorkersReadEachFileOnce) {
  const SampleList list = write_tree("threads", 16);
  ShardedStore s(list, 0, 1);
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      for (size_t i = 0; i < s.size(); ++i) s.image_bytes((i * 7 + 3) % s.size());
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(s.file_bytes_read(), 16 * kFileBytes);
}

TEST(ShardedStore, MissingFileAndMaskAreErrorsNamingThem) {
  SampleList list = write_tree("missing", 2);
  list.samples[1].image += ".gone";
  ShardedStore s(list, 0, 1);
  try {
    s.image_bytes(1);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(".png.gone"), std::string::npos) << e.what();
  }
  EXPECT_THROW(s.mask_bytes(0), InvalidArgument);  // classification samples have no mask
}

}  // namespace
}  // namespace data
}  // namespace tessera
