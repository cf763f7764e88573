// Whole-slide images, read a region at a time: a rank of a spatial grid reads only its tile of a
// slide, never decoding the rest. Tiled TIFFs (libtiff: the tiles overlapping the region are
// read and decoded, nothing else); PNG and JPEG (smaller inputs) are decoded whole and cropped.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace tessera {
namespace data {

class SlideReader {
 public:
  // Throws InvalidArgument naming the file when it cannot be opened or is not RGB 8-bit.
  explicit SlideReader(const std::string& path);
  ~SlideReader();
  SlideReader(const SlideReader&) = delete;
  SlideReader& operator=(const SlideReader&) = delete;

  int64_t height() const { return height_; }
  int64_t width() const { return width_; }
  bool tiled() const { return tiled_; }
  // Pixels [h, w, 3] u8 RGB of rows [y, y + h) and columns [x, x + w). A region outside the
  // slide is an InvalidArgument naming the region, the slide's size and the file.
  torch::Tensor read_region(int64_t y, int64_t x, int64_t h, int64_t w);

 private:
  struct Tiff;
  std::string path_;
  int64_t height_ = 0, width_ = 0;
  bool tiled_ = false;
  std::unique_ptr<Tiff> tiff_;
  torch::Tensor whole_;  // PNG / JPEG
};

// Writes a tiled, deflate-compressed RGB TIFF of height x width, asking `fill(y, x, h, w, out)`
// for each tile's pixels (h x w x 3 bytes, row-major) so a slide never has to fit in memory.
void write_tiled_tiff(
    const std::string& path, int64_t height, int64_t width, int64_t tile,
    const std::function<void(int64_t, int64_t, int64_t, int64_t, uint8_t*)>& fill);

}  // namespace data
}  // namespace tessera
