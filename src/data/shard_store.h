// The in-memory sharded store (Kumar et al. held each node's share of ImageNet in memory): each
// rank keeps only its shard of the sample list (a deterministic partition: by default samples
// rank, rank + N, rank + 2N, ...), reads each file the first time it is asked for, and answers
// every later request from memory, so from the second epoch on the training loop reads no file.
// Thread-safe for readers: several pipeline workers may ask at once; each file is read exactly
// once. reassign() (the global reshuffle) must not run concurrently with readers.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/formats.h"

namespace tessera {
namespace data {

// The strided partition: global indices rank, rank + ranks, ... below size.
std::vector<int64_t> strided_shard(int64_t size, int rank, int ranks);

class ShardedStore {
 public:
  // Applied once to a file's bytes before they are kept (e.g. decoding, so the store holds
  // pixels); `mask` says which of the sample's two files it is. Throws to refuse the file.
  using Keep = std::function<std::string(std::string bytes, const std::string& path, bool mask)>;

  // This rank's shard of `list`: the strided partition. Throws InvalidArgument if it would be
  // empty.
  ShardedStore(const SampleList& list, int rank, int ranks, Keep keep = nullptr);
  // The samples of `list` at `indices` (global indices, each once).
  ShardedStore(const SampleList& list, std::vector<int64_t> indices, Keep keep = nullptr);
  ShardedStore(const ShardedStore&) = delete;
  ShardedStore& operator=(const ShardedStore&) = delete;

  // Samples in this rank's shard, and sample i of it (index into the shard).
  size_t size() const { return indices_.size(); }
  const Sample& sample(size_t i) const { return list_.samples.at(global_index(i)); }
  // Index of shard sample i in the whole list, and all of them in shard order.
  size_t global_index(size_t i) const { return static_cast<size_t>(indices_.at(i)); }
  const std::vector<int64_t>& indices() const { return indices_; }
  const SampleList& list() const { return list_; }

  // The kept bytes of shard sample i's image / mask: read from its file on the first call,
  // from memory after. Throws InvalidArgument naming the file if it cannot be read (or `keep`
  // refused it; the next call tries again).
  const std::string& image_bytes(size_t i);
  const std::string& mask_bytes(size_t i);

  // Reads every sample not read yet (the end of the first pass: the samples an epoch's whole
  // batches left out), so no later epoch reads a file. Files `keep` refuses stay unread (the
  // pipeline meets them when it asks). Returns the bytes read.
  uint64_t load_all();

  // The global reshuffle's two halves. take(): the kept bytes {image, mask} of the shard's
  // samples, read first where still missing, leaving the store empty. reassign(): the new
  // shard `indices`, whose bytes are in `held` (by global index; what is missing from it is read
  // from its file when asked for, as on the first pass).
  struct Held {
    std::string image, mask;
  };
  std::unordered_map<int64_t, Held> take();
  void reassign(std::vector<int64_t> indices, std::unordered_map<int64_t, Held> held);

  // Bytes held in memory, and bytes this store has read from files.
  size_t memory_bytes() const { return memory_.load(); }
  uint64_t file_bytes_read() const { return read_.load(); }

 private:
  struct File {
    std::once_flag once;
    std::string bytes;
  };
  struct Entry {
    File image, mask;
  };
  const std::string& load(File& f, const std::string& path, bool mask);
  void check_index(size_t i) const;

  const SampleList& list_;
  Keep keep_;
  std::vector<int64_t> indices_;
  std::vector<std::unique_ptr<Entry>> entries_;
  std::atomic<size_t> memory_{0};
  std::atomic<uint64_t> read_{0};
};

// Bytes this process has read through read(2) and friends so far (/proc/self/io "rchar"), for
// tests and reports that prove the store reads no file after the first epoch.
uint64_t process_read_bytes();

}  // namespace data
}  // namespace tessera
