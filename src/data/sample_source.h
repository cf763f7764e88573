// Turning a rank's shard of a data set into batches: the bytes from the in-memory store, decoded
// (OpenCV / libpng) and augmented on whichever pipeline worker asks. Every sample's augmentation
// draws from a generator seeded by (seed, epoch, global index), so a batch is the same whichever
// worker makes it, however many workers there are, and on whichever rank holds the sample.
//
// Corrupt files (CorruptImage: undecodable, truncated) are skipped, not fatal: the first time a
// sample is found corrupt its file is named in a warning and recorded; in training batches the
// next good sample of the epoch's order (after the batch, wrapping around) takes its place so
// every rank's batch keeps its size; in evaluation batches it is left out. The trainer lists
// them at the end of the epoch and stops when too many are corrupt. Every other problem (a mask
// whose size differs from its image, a label outside the classes, a missing file) is an error
// naming the file.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/dataset.h"
#include "data/shard_store.h"
#include "data/synthetic_shapes.h"

namespace tessera {
namespace data {

struct SourceOptions {
  bool train = true;         // training augmentation; false: the fixed evaluation crop
  int64_t image_size = 224;  // output side (classification) or crop side (segmentation)
  uint64_t seed = 0;
  // Keep decoded pixels in memory instead of the encoded files: no decoding after the first
  // epoch, at several times the memory.
  bool keep_decoded = false;
  bool quiet = false;  // no warnings on stderr (tests)
  // Segmentation training: the range of the random scale before the crop (augment.h).
  double min_scale = 0.5, max_scale = 2.0;
};

struct CorruptSample {
  int64_t index = 0;   // in the whole data set
  std::string reason;  // names the file
};

class SampleSource {
 public:
  // `data` must outlive the source. `shard`: the global indices this rank holds, in order.
  SampleSource(const DataSet& data, std::vector<int64_t> shard, const SourceOptions& options);

  ShardedStore& store() { return store_; }
  const DataSet& data() const { return data_; }

  // The batch of the shard samples at positions[begin, begin + count) (positions into the
  // store's shard) for epoch `epoch`. Thread-safe.
  Batch make_batch(const std::vector<int64_t>& positions, size_t begin, size_t count,
                   int64_t epoch);

  // Corrupt samples found so far (by this source or marked from elsewhere), by global index.
  std::vector<CorruptSample> corrupt() const;
  // Samples other ranks found corrupt: skipped here without decoding or another warning.
  void mark_corrupt(const std::vector<CorruptSample>& found);

 private:
  // Decodes and augments shard sample `pos` into slot k of `b`; false if it is corrupt.
  bool fill(Batch& b, int64_t k, int64_t pos, int64_t epoch);
  bool known_corrupt(int64_t global) const;

  const DataSet& data_;
  SourceOptions options_;
  ShardedStore store_;
  mutable std::mutex mu_;
  std::unordered_map<int64_t, std::string> corrupt_;
};

// The kept-bytes form of a decoded image or mask (SourceOptions::keep_decoded), and the
// decoders that accept both it and encoded files.
std::string raw_pixels(const torch::Tensor& pixels);
torch::Tensor decode_kept_image(const std::string& bytes, const std::string& source);
torch::Tensor decode_kept_mask(const std::string& bytes, const std::string& source);

}  // namespace data
}  // namespace tessera
