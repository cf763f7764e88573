// Decoding images and label masks from their encoded bytes (what the in-memory store keeps).
//
// Images go through OpenCV's imgcodecs (JPEG, PNG, ...), from Debian's libopencv. Label masks
// go through libpng directly: a Pascal VOC mask is a palette PNG whose palette *indices* are
// the labels, and OpenCV expands palettes to colours; libpng hands the indices over as they
// are. Both throw CorruptImage naming `source` for corrupt or truncated data (a JPEG without its
// end-of-image marker counts as truncated: libjpeg would fill the missing rows with grey).
#pragma once

#include <torch/torch.h>

#include <string>

#include "common/error.h"

namespace tessera {
namespace data {

// The bytes are not a decodable image (corrupt, truncated, not an image format): the pipeline
// skips such a sample (with a warning naming the file) instead of stopping. Every other
// InvalidArgument (a colour PNG as a mask, a missing file) stays an error.
class CorruptImage : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// [H, W, 3] u8, RGB.
torch::Tensor decode_image(const std::string& bytes, const std::string& source);
// [H, W] u8: the palette index of a palette PNG, or the value of an 8-bit grayscale PNG.
// Other PNG types (colour, 16-bit) are refused, naming the source and what is accepted.
torch::Tensor decode_mask(const std::string& bytes, const std::string& source);
// PNG bytes of a palette image with the Pascal VOC colour map (for tools and tests):
// `mask` [H, W] u8.
std::string encode_palette_png(const torch::Tensor& mask);
// PNG bytes of an RGB picture (`rgb` [H, W, 3] u8), e.g. the demo's predictions grid.
std::string encode_png(const torch::Tensor& rgb);
// The Pascal VOC colour map: colour of index i (r, g, b), i in 0..255.
std::array<uint8_t, 3> voc_color(int index);

}  // namespace data
}  // namespace tessera
