#include "data/image_codec.h"

#include <png.h>

#include <csetjmp>
#include <cstring>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "common/error.h"

namespace tessera {
namespace data {
namespace {

struct Reader {
  const std::string* bytes;
  size_t at;
};

void read_from_memory(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<Reader*>(png_get_io_ptr(png));
  if (r->at + n > r->bytes->size()) png_error(png, "truncated PNG data");
  std::memcpy(out, r->bytes->data() + r->at, n);
  r->at += n;
}

void write_to_string(png_structp png, png_bytep data, png_size_t n) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), n);
}

// libpng reports errors by longjmp: everything between setjmp and the last libpng call is
// plain data (no destructors skipped); the message is kept for the exception thrown after.
struct PngError {
  char message[256] = "";
};

void on_png_error(png_structp png, png_const_charp msg) {
  auto* e = static_cast<PngError*>(png_get_error_ptr(png));
  std::snprintf(e->message, sizeof e->message, "%s", msg);
  png_longjmp(png, 1);
}

void on_png_warning(png_structp, png_const_charp) {}

// Decodes into `out` (h*w bytes, allocated by the caller after the header is read). Returns 0
// on success, 1 on a libpng error (message in err), 2 for an unsupported type.
int read_indices(const std::string& bytes, PngError* err, png_uint_32* w, png_uint_32* h,
                 int* color_type, int* bit_depth, std::vector<uint8_t>* out) {
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, err, on_png_error, on_png_warning);
  if (!png) return 1;
  png_infop info = png_create_info_struct(png);
  Reader reader{&bytes, 0};
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return 1;
  }
  png_set_read_fn(png, &reader, read_from_memory);
  png_read_info(png, info);
  *w = png_get_image_width(png, info);
  *h = png_get_image_height(png, info);
  *color_type = png_get_color_type(png, info);
  *bit_depth = png_get_bit_depth(png, info);
  const bool ok = (*color_type == PNG_COLOR_TYPE_PALETTE || *color_type == PNG_COLOR_TYPE_GRAY) &&
                  *bit_depth <= 8;
  if (!ok) {
    png_destroy_read_struct(&png, &info, nullptr);
    return 2;
  }
  if (*bit_depth < 8) png_set_packing(png);  // one byte per index; no palette expansion
  png_read_update_info(png, info);
  out->resize(static_cast<size_t>(*w) * *h);
  for (png_uint_32 y = 0; y < *h; ++y)
    png_read_row(png, out->data() + static_cast<size_t>(y) * *w, nullptr);
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return 0;
}

// A JPEG's entropy-coded data cannot hold the byte pair FF D9 (an FF there is followed by 00 or
// a restart marker), so the end-of-image marker near the end is the sign of a whole file; a few
// bytes of padding after it are allowed.
bool jpeg_is_whole(const std::string& bytes) {
  const size_t n = bytes.size();
  for (size_t i = n >= 2 ? n - 2 : 0, k = 0; k < 32 && i + 1 < n; --i, ++k) {
    if (static_cast<uint8_t>(bytes[i]) == 0xFF && static_cast<uint8_t>(bytes[i + 1]) == 0xD9)
      return true;
    if (i == 0) break;
  }
  return false;
}

}  // namespace

torch::Tensor decode_image(const std::string& bytes, const std::string& source) {
  if (bytes.empty()) throw CorruptImage("image '" + source + "' is empty");
  const bool jpeg = bytes.size() >= 3 && static_cast<uint8_t>(bytes[0]) == 0xFF &&
                    static_cast<uint8_t>(bytes[1]) == 0xD8 &&
                    static_cast<uint8_t>(bytes[2]) == 0xFF;
  if (jpeg && !jpeg_is_whole(bytes)) {
    throw CorruptImage("image '" + source + "' is a truncated JPEG (no end-of-image marker)");
  }
  cv::Mat buf(1, static_cast<int>(bytes.size()), CV_8UC1, const_cast<char*>(bytes.data()));
  cv::Mat bgr = cv::imdecode(buf, cv::IMREAD_COLOR);
  if (bgr.empty()) {
    throw CorruptImage("image '" + source +
                       "' cannot be decoded (corrupt, truncated, or not an image format OpenCV "
                       "reads)");
  }
  cv::Mat rgb;
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  return torch::from_blob(rgb.data, {rgb.rows, rgb.cols, 3}, torch::kUInt8).clone();
}

torch::Tensor decode_mask(const std::string& bytes, const std::string& source) {
  if (bytes.size() < 8 || png_sig_cmp(reinterpret_cast<png_const_bytep>(bytes.data()), 0, 8) != 0)
    throw CorruptImage("mask '" + source + "' is not a PNG file");
  PngError err;
  png_uint_32 w = 0, h = 0;
  int color_type = 0, bit_depth = 0;
  std::vector<uint8_t> pixels;
  const int rc = read_indices(bytes, &err, &w, &h, &color_type, &bit_depth, &pixels);
  if (rc == 1) throw CorruptImage("mask '" + source + "' cannot be decoded: " + err.message);
  TESSERA_CHECK(rc != 2, "mask '", source, "' is a PNG of colour type ", color_type, " at ",
                bit_depth, " bits; accepted: palette or 8-bit grayscale (label indices)");
  return torch::from_blob(pixels.data(), {static_cast<int64_t>(h), static_cast<int64_t>(w)},
                          torch::kUInt8)
      .clone();
}

std::string encode_png(const torch::Tensor& rgb) {
  TESSERA_CHECK(rgb.dim() == 3 && rgb.size(2) == 3 && rgb.scalar_type() == torch::kUInt8,
                "encode_png needs a [H, W, 3] u8 picture, got ", rgb.sizes(), " ",
                rgb.scalar_type());
  torch::Tensor c = rgb.contiguous();
  cv::Mat in(static_cast<int>(c.size(0)), static_cast<int>(c.size(1)), CV_8UC3, c.data_ptr());
  cv::Mat bgr;
  cv::cvtColor(in, bgr, cv::COLOR_RGB2BGR);
  std::vector<uchar> out;
  TESSERA_CHECK(cv::imencode(".png", bgr, out), "OpenCV could not encode a PNG of ", rgb.sizes());
  return std::string(out.begin(), out.end());
}

std::array<uint8_t, 3> voc_color(int index) {
  // The Pascal VOC devkit's bit-interleaved colour map.
  std::array<uint8_t, 3> c = {0, 0, 0};
  int v = index;
  for (int shift = 7; shift >= 0; --shift, v >>= 3) {
    for (int ch = 0; ch < 3; ++ch)
      c[static_cast<size_t>(ch)] |= static_cast<uint8_t>(((v >> ch) & 1) << shift);
  }
  return c;
}

std::string encode_palette_png(const torch::Tensor& mask) {
  TESSERA_CHECK(mask.dim() == 2 && mask.scalar_type() == torch::kUInt8,
                "encode_palette_png needs a [H, W] u8 mask, got ", mask.sizes());
  torch::Tensor m = mask.contiguous();
  std::string out;
  PngError err;
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, &err, on_png_error, on_png_warning);
  png_infop info = png_create_info_struct(png);
  std::vector<png_color> palette(256);
  for (int i = 0; i < 256; ++i) {
    const auto c = voc_color(i);
    palette[static_cast<size_t>(i)] = {c[0], c[1], c[2]};
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    throw InternalError(std::string("libpng: ") + err.message);
  }
  png_set_write_fn(png, &out, write_to_string, nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(m.size(1)), static_cast<png_uint_32>(m.size(0)),
               8, PNG_COLOR_TYPE_PALETTE, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_set_PLTE(png, info, palette.data(), 256);
  png_write_info(png, info);
  for (int64_t y = 0; y < m.size(0); ++y) {
    png_write_row(png, m.data_ptr<uint8_t>() + y * m.size(1));
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

}  // namespace data
}  // namespace tessera
