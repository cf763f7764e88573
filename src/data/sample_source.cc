#include "data/sample_source.h"

#include <cstdio>
#include <cstring>
#include <random>

#include "common/error.h"
#include "data/augment.h"
#include "data/image_codec.h"
#include "data/shape.h"

namespace tessera {
namespace data {
namespace {

constexpr char kRawMagic[8] = {'T', 'S', 'R', 'A', 'W', 'P', 'X', '1'};

bool is_raw(const std::string& bytes) {
  return bytes.size() >= 32 && std::memcmp(bytes.data(), kRawMagic, 8) == 0;
}

torch::Tensor from_raw(const std::string& bytes) {
  int64_t dims[3];
  std::memcpy(dims, bytes.data() + 8, sizeof dims);
  std::vector<int64_t> shape(dims, dims + (dims[2] == 0 ? 2 : 3));
  int64_t n = dims[0] * dims[1] * (dims[2] == 0 ? 1 : dims[2]);
  TESSERA_CHECK(static_cast<int64_t>(bytes.size()) == 32 + n, "kept pixels are damaged");
  return torch::from_blob(const_cast<char*>(bytes.data()) + 32, shape, torch::kUInt8).clone();
}

}  // namespace

std::string raw_pixels(const torch::Tensor& pixels) {
  torch::Tensor p = pixels.contiguous();
  TESSERA_CHECK(p.scalar_type() == torch::kUInt8 && (p.dim() == 2 || p.dim() == 3),
                "raw_pixels keeps [H, W] or [H, W, C] u8, got ", p.sizes());
  const int64_t dims[3] = {p.size(0), p.size(1), p.dim() == 3 ? p.size(2) : 0};
  std::string out(kRawMagic, 8);
  out.append(reinterpret_cast<const char*>(dims), sizeof dims);
  out.append(reinterpret_cast<const char*>(p.data_ptr<uint8_t>()), static_cast<size_t>(p.numel()));
  return out;
}

torch::Tensor decode_kept_image(const std::string& bytes, const std::string& source) {
  return is_raw(bytes) ? from_raw(bytes) : decode_image(bytes, source);
}

torch::Tensor decode_kept_mask(const std::string& bytes, const std::string& source) {
  return is_raw(bytes) ? from_raw(bytes) : decode_mask(bytes, source);
}

SampleSource::SampleSource(const DataSet& data, std::vector<int64_t> shard,
                           const SourceOptions& options)
    : data_(data),
      options_(options),
      store_(data.list, std::move(shard),
             options.keep_decoded
                 ? ShardedStore::Keep([](std::string bytes, const std::string& path, bool mask) {
                     return raw_pixels(mask ? decode_mask(bytes, path) : decode_image(bytes, path));
                   })
                 : ShardedStore::Keep()) {
  TESSERA_CHECK(options.image_size >= 16, "the image size must be >= 16, got ", options.image_size);
}

bool SampleSource::known_corrupt(int64_t global) const {
  std::lock_guard<std::mutex> lock(mu_);
  return corrupt_.count(global) > 0;
}

std::vector<CorruptSample> SampleSource::corrupt() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CorruptSample> out;
  for (const auto& [index, reason] : corrupt_) out.push_back({index, reason});
  std::sort(out.begin(), out.end(),
            [](const CorruptSample& a, const CorruptSample& b) { return a.index < b.index; });
  return out;
}

void SampleSource::mark_corrupt(const std::vector<CorruptSample>& found) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const CorruptSample& c : found) corrupt_.emplace(c.index, c.reason);
}

bool SampleSource::fill(Batch& b, int64_t k, int64_t pos, int64_t epoch) {
  const size_t i = static_cast<size_t>(pos);
  const int64_t global = static_cast<int64_t>(store_.global_index(i));
  if (known_corrupt(global)) return false;
  const Sample& s = store_.sample(i);
  torch::Tensor image, mask;
  try {
    image = decode_kept_image(store_.image_bytes(i), s.image);
    if (data_.segmentation) mask = decode_kept_mask(store_.mask_bytes(i), s.mask);
  } catch (const CorruptImage& e) {
    bool first;
    {
      std::lock_guard<std::mutex> lock(mu_);
      first = corrupt_.emplace(global, e.what()).second;
    }
    if (first && !options_.quiet) {
      std::fprintf(stderr, "warning: skipping a corrupt sample: %s\n", e.what());
    }
    return false;
  }
  std::mt19937_64 rng(mix_seed(mix_seed(options_.seed) ^
                               mix_seed(static_cast<uint64_t>(epoch) * 0x100000001b3ull) ^
                               static_cast<uint64_t>(global)));
  if (!data_.segmentation) {
    TESSERA_CHECK(s.label >= 0 && s.label < data_.num_classes, "'", s.image, "' has label ",
                  s.label, ", outside the ", data_.num_classes, " classes (0..",
                  data_.num_classes - 1, ")");
    ClassificationAugment a;
    a.size = options_.image_size;
    b.images[k] =
        options_.train ? augment_classification(image, a, rng) : eval_classification(image, a);
    b.labels[k] = s.label;
    return true;
  }
  if (data_.format == Format::kCityscapes) {
    static const torch::Tensor lut = [] {
      torch::Tensor t = torch::full({256}, 255, torch::kUInt8);
      for (int id = 0; id < 34; ++id) t[id] = cityscapes_train_id(id);
      return t;
    }();
    mask = lut.index_select(0, mask.reshape({-1}).to(torch::kLong)).reshape(mask.sizes());
  }
  const torch::Tensor bad = (mask >= data_.num_classes) & (mask != 255);
  if (bad.any().item<bool>()) {
    const int v = mask.masked_select(bad)[0].item<int>();
    throw InvalidArgument("mask '" + s.mask + "' holds label " + std::to_string(v) +
                          ", outside the data set's " + std::to_string(data_.num_classes) +
                          " classes (0.." + std::to_string(data_.num_classes - 1) +
                          ", and 255 for ignored pixels)");
  }
  SegmentationAugment a;
  a.crop = options_.image_size;
  a.min_scale = options_.min_scale;
  a.max_scale = options_.max_scale;
  auto [x, y] = options_.train ? augment_segmentation(image, mask, a, rng, s.mask)
                               : eval_segmentation(image, mask, a, s.mask);
  b.images[k] = x;
  b.masks[k] = y;
  return true;
}

Batch SampleSource::make_batch(const std::vector<int64_t>& positions, size_t begin, size_t count,
                               int64_t epoch) {
  TESSERA_CHECK(begin + count <= positions.size(), "batch [", begin, ", ", begin + count,
                ") is outside the epoch's ", positions.size(), " samples");
  torch::NoGradGuard no_grad;
  const int64_t s = options_.image_size;
  const int64_t n = static_cast<int64_t>(count);
  Batch b;
  b.images = torch::empty({n, 3, s, s});
  if (data_.segmentation) {
    b.masks = torch::empty({n, s, s}, torch::kLong);
  } else {
    b.labels = torch::empty({n}, torch::kLong);
  }
  int64_t filled = 0;
  size_t next = begin + count;  // where replacements are looked for
  size_t tried = 0;
  for (size_t j = begin; j < begin + count; ++j) {
    if (fill(b, filled, positions[j], epoch)) {
      ++filled;
      continue;
    }
    if (!options_.train) continue;  // evaluation: left out
    // Training: the next good sample of the epoch's order takes its place.
    for (;;) {
      TESSERA_CHECK(tried < positions.size(), "every sample of this rank's shard of ",
                    positions.size(), " is corrupt");
      const int64_t pos = positions[next % positions.size()];
      ++next;
      ++tried;
      if (fill(b, filled, pos, epoch)) {
        ++filled;
        break;
      }
    }
  }
  if (filled < n) {
    b.images = b.images.narrow(0, 0, filled);
    if (data_.segmentation) {
      b.masks = b.masks.narrow(0, 0, filled);
    } else {
      b.labels = b.labels.narrow(0, 0, filled);
    }
  }
  return b;
}

}  // namespace data
}  // namespace tessera
