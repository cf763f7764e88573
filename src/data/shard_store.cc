#include "data/shard_store.h"

#include <fstream>
#include <unordered_set>

#include "common/atomic_file.h"
#include "common/error.h"

namespace tessera {
namespace data {

std::vector<int64_t> strided_shard(int64_t size, int rank, int ranks) {
  TESSERA_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "rank ", rank, " of ", ranks,
                " is not a rank");
  std::vector<int64_t> out;
  for (int64_t i = rank; i < size; i += ranks) out.push_back(i);
  TESSERA_CHECK(!out.empty(), "the data set has ", size, " samples, too few for rank ", rank,
                " of ", ranks, " to hold any");
  return out;
}

ShardedStore::ShardedStore(const SampleList& list, int rank, int ranks, Keep keep)
    : ShardedStore(list, strided_shard(static_cast<int64_t>(list.samples.size()), rank, ranks),
                   std::move(keep)) {}

ShardedStore::ShardedStore(const SampleList& list, std::vector<int64_t> indices, Keep keep)
    : list_(list), keep_(std::move(keep)) {
  reassign(std::move(indices), {});
}

void ShardedStore::reassign(std::vector<int64_t> indices, std::unordered_map<int64_t, Held> held) {
  const int64_t n = static_cast<int64_t>(list_.samples.size());
  std::vector<std::unique_ptr<Entry>> entries;
  size_t memory = 0;
  std::unordered_set<int64_t> seen;
  for (int64_t g : indices) {
    TESSERA_CHECK(g >= 0 && g < n, "sample ", g, " is outside the data set of ", n);
    TESSERA_CHECK(seen.insert(g).second, "sample ", g, " is twice in the shard");
    auto e = std::make_unique<Entry>();
    auto it = held.find(g);
    if (it != held.end()) {
      // Mark the bytes as loaded: call_once with a body that cannot throw.
      std::call_once(e->image.once, [&] { e->image.bytes = std::move(it->second.image); });
      std::call_once(e->mask.once, [&] { e->mask.bytes = std::move(it->second.mask); });
      memory += e->image.bytes.size() + e->mask.bytes.size();
      held.erase(it);
    }
    entries.push_back(std::move(e));
  }
  TESSERA_CHECK(held.empty(), "the store was handed ", held.size(),
                " samples outside its new shard (sample ", held.empty() ? 0 : held.begin()->first,
                ")");
  indices_ = std::move(indices);
  entries_ = std::move(entries);
  memory_ = memory;
}

std::unordered_map<int64_t, ShardedStore::Held> ShardedStore::take() {
  std::unordered_map<int64_t, Held> out;
  for (size_t i = 0; i < indices_.size(); ++i) {
    image_bytes(i);  // read now if still missing
    Held h;
    h.image = std::move(entries_[i]->image.bytes);
    if (!sample(i).mask.empty()) {
      mask_bytes(i);
      h.mask = std::move(entries_[i]->mask.bytes);
    }
    out.emplace(indices_[i], std::move(h));
  }
  indices_.clear();
  entries_.clear();
  memory_ = 0;
  return out;
}

uint64_t ShardedStore::load_all() {
  const uint64_t before = read_.load();
  for (size_t i = 0; i < indices_.size(); ++i) {
    try {
      image_bytes(i);
      if (!sample(i).mask.empty()) mask_bytes(i);
    } catch (const InvalidArgument&) {
      // Refused by `keep` (a corrupt file under keep-decoded): left for the pipeline to report.
    }
  }
  return read_.load() - before;
}

const std::string& ShardedStore::load(File& f, const std::string& path, bool mask) {
  std::call_once(f.once, [&] {
    std::vector<char> b = read_file(path);
    read_ += b.size();
    std::string bytes(b.begin(), b.end());
    f.bytes = keep_ ? keep_(std::move(bytes), path, mask) : std::move(bytes);
    memory_ += f.bytes.size();
  });
  return f.bytes;
}

void ShardedStore::check_index(size_t i) const {
  TESSERA_CHECK(i < indices_.size(), "sample ", i, " is outside this shard of ", indices_.size());
}

const std::string& ShardedStore::image_bytes(size_t i) {
  check_index(i);
  return load(entries_[i]->image, sample(i).image, false);
}

const std::string& ShardedStore::mask_bytes(size_t i) {
  check_index(i);
  TESSERA_CHECK(!sample(i).mask.empty(), "sample '", sample(i).image, "' has no mask");
  return load(entries_[i]->mask, sample(i).mask, true);
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
