// The in-memory sharded store (Kumar et al. held each node's share of ImageNet in memory): each
// rank keeps only its shard of the sample list, samples rank, rank + N, rank + 2N, ... (a
// deterministic partition), reads each file the first time it is asked for, and answers every
// later request from memory, so from the second epoch on the training loop reads no file.
// Thread-safe: several pipeline workers may ask at once; each file is read exactly once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/formats.h"

namespace tessera {
namespace data {

class ShardedStore {
 public:
  // This rank's shard of `list`. Throws InvalidArgument if the shard would be empty.
  ShardedStore(const SampleList& list, int rank, int ranks);
  ShardedStore(const ShardedStore&) = delete;
  ShardedStore& operator=(const ShardedStore&) = delete;

  // Samples in this rank's shard, and sample i of it (index into the shard).
  size_t size() const { return samples_.size(); }
  const Sample& sample(size_t i) const { return samples_.at(i); }
  // Index of shard sample i in the whole list.
  size_t global_index(size_t i) const { return i * static_cast<size_t>(ranks_) + rank_; }

  // The encoded bytes of shard sample i's image / mask: read from its file on the first call,
  // from memory after. Throws InvalidArgument naming the file if it cannot be read.
  const std::string& image_bytes(size_t i);
  const std::string& mask_bytes(size_t i);

  // Bytes held in memory, and bytes this store has read from files.
  size_t memory_bytes() const { return memory_.load(); }
  uint64_t file_bytes_read() const { return read_.load(); }

 private:
  struct Entry {
    std::once_flag once;
    std::string bytes;
  };
  const std::string& load(Entry& e, const std::string& path);

  int rank_, ranks_;
  std::vector<Sample> samples_;
  std::unique_ptr<Entry[]> images_, masks_;
  std::atomic<size_t> memory_{0};
  std::atomic<uint64_t> read_{0};
};

// Bytes this process has read through read(2) and friends so far (/proc/self/io "rchar"), for
// tests and reports that prove the store reads no file after the first epoch.
uint64_t process_read_bytes();

}  // namespace data
}  // namespace tessera
