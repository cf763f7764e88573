#include "data/shard_store.h"

#include <fstream>

#include "common/atomic_file.h"
#include "common/error.h"

namespace tessera {
namespace data {

ShardedStore::ShardedStore(const SampleList& list, int rank, int ranks)
    : rank_(rank), ranks_(ranks) {
  TESSERA_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "rank ", rank, " of ", ranks,
                " is not a rank");
  for (size_t i = static_cast<size_t>(rank); i < list.samples.size();
       i += static_cast<size_t>(ranks)) {
    samples_.push_back(list.samples[i]);
  }
  TESSERA_CHECK(!samples_.empty(), "the data set has ", list.samples.size(),
                " samples, too few for rank ", rank, " of ", ranks, " to hold any");
  images_ = std::make_unique<Entry[]>(samples_.size());
  masks_ = std::make_unique<Entry[]>(samples_.size());
}

const std::string& ShardedStore::load(Entry& e, const std::string& path) {
  std::call_once(e.once, [&] {
    std::vector<char> b = read_file(path);
    e.bytes.assign(b.begin(), b.end());
    read_ += e.bytes.size();
    memory_ += e.bytes.size();
  });
  return e.bytes;
}

const std::string& ShardedStore::image_bytes(size_t i) {
  TESSERA_CHECK(i < samples_.size(), "sample ", i, " is outside this shard of ", samples_.size());
  return load(images_[i], samples_[i].image);
}

const std::string& ShardedStore::mask_bytes(size_t i) {
  TESSERA_CHECK(i < samples_.size(), "sample ", i, " is outside this shard of ", samples_.size());
  TESSERA_CHECK(!samples_[i].mask.empty(), "sample '", samples_[i].image, "' has no mask");
  return load(masks_[i], samples_[i].mask);
}

uint64_t process_read_bytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "rchar:") return value;
  }
  return 0;
}

}  // namespace data
}  // namespace tessera
