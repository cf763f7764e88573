#include "data/slide.h"

#include <tiffio.h>

#include <cstring>
#include <vector>

#include "common/atomic_file.h"
#include "common/error.h"
#include "data/image_codec.h"

namespace tessera {
namespace data {
namespace {

// libtiff prints its errors and warnings to stderr by default; tessera reports them itself.
void quiet_tiff() {
  static const bool done = [] {
    TIFFSetErrorHandler(nullptr);
    TIFFSetWarningHandler(nullptr);
    return true;
  }();
  (void)done;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  if (s.size() < suffix.size()) return false;
  std::string tail = s.substr(s.size() - suffix.size());
  for (char& c : tail) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return tail == suffix;
}

}  // namespace

struct SlideReader::Tiff {
  TIFF* t = nullptr;
  uint32_t tile_w = 0, tile_h = 0;
  ~Tiff() {
    if (t != nullptr) TIFFClose(t);
  }
};

SlideReader::SlideReader(const std::string& path) : path_(path) {
  if (ends_with(path, ".tif") || ends_with(path, ".tiff")) {
    quiet_tiff();
    tiff_ = std::make_unique<Tiff>();
    // "m": read(2), not mmap, so what is read is what the tile needs, and /proc/self/io says so.
    tiff_->t = TIFFOpen(path.c_str(), "rm");
    TESSERA_CHECK(tiff_->t != nullptr, "slide '", path, "' cannot be opened as a TIFF");
    uint32_t w = 0, h = 0;
    uint16_t spp = 0, bps = 0, planar = PLANARCONFIG_CONTIG;
    TIFFGetField(tiff_->t, TIFFTAG_IMAGEWIDTH, &w);
    TIFFGetField(tiff_->t, TIFFTAG_IMAGELENGTH, &h);
    TIFFGetFieldDefaulted(tiff_->t, TIFFTAG_SAMPLESPERPIXEL, &spp);
    TIFFGetFieldDefaulted(tiff_->t, TIFFTAG_BITSPERSAMPLE, &bps);
    TIFFGetFieldDefaulted(tiff_->t, TIFFTAG_PLANARCONFIG, &planar);
    TESSERA_CHECK(TIFFIsTiled(tiff_->t), "slide '", path,
                  "' is a TIFF in strips; accepted: tiled TIFF (pyramidal slides are), PNG, JPEG");
    TESSERA_CHECK(spp == 3 && bps == 8 && planar == PLANARCONFIG_CONTIG, "slide '", path, "' has ",
                  spp, " samples of ", bps, " bits per pixel; accepted: 8-bit RGB, interleaved");
    TIFFGetField(tiff_->t, TIFFTAG_TILEWIDTH, &tiff_->tile_w);
    TIFFGetField(tiff_->t, TIFFTAG_TILELENGTH, &tiff_->tile_h);
    width_ = w;
    height_ = h;
    tiled_ = true;
    return;
  }
  std::vector<char> bytes = read_file(path);
  whole_ = decode_image(std::string(bytes.begin(), bytes.end()), path);
  height_ = whole_.size(0);
  width_ = whole_.size(1);
}

SlideReader::~SlideReader() = default;

torch::Tensor SlideReader::read_region(int64_t y, int64_t x, int64_t h, int64_t w) {
  TESSERA_CHECK(h > 0 && w > 0 && y >= 0 && x >= 0 && y + h <= height_ && x + w <= width_,
                "region rows [", y, ", ", y + h, ") x columns [", x, ", ", x + w,
                ") is outside slide '", path_, "' of ", height_, " x ", width_);
  if (!tiled_) return whole_.narrow(0, y, h).narrow(1, x, w).clone();
  torch::Tensor out = torch::empty({h, w, 3}, torch::kUInt8);
  const int64_t th = tiff_->tile_h, tw = tiff_->tile_w;
  std::vector<uint8_t> buf(static_cast<size_t>(TIFFTileSize(tiff_->t)));
  for (int64_t ty = y / th * th; ty < y + h; ty += th) {
    for (int64_t tx = x / tw * tw; tx < x + w; tx += tw) {
      const ttile_t index =
          TIFFComputeTile(tiff_->t, static_cast<uint32_t>(tx), static_cast<uint32_t>(ty), 0, 0);
      TESSERA_CHECK(
          TIFFReadEncodedTile(tiff_->t, index, buf.data(), static_cast<tmsize_t>(buf.size())) >= 0,
          "slide '", path_, "': tile at row ", ty, ", column ", tx,
          " cannot be read (truncated or corrupt)");
      // The overlap of this tile with the region, copied row by row.
      const int64_t r0 = std::max(y, ty), r1 = std::min(y + h, ty + th);
      const int64_t c0 = std::max(x, tx), c1 = std::min(x + w, tx + tw);
      for (int64_t r = r0; r < r1; ++r) {
        std::memcpy(out.data_ptr<uint8_t>() + ((r - y) * w + (c0 - x)) * 3,
                    buf.data() + ((r - ty) * tw + (c0 - tx)) * 3,
                    static_cast<size_t>((c1 - c0) * 3));
      }
    }
  }
  return out;
}

void write_tiled_tiff(
    const std::string& path, int64_t height, int64_t width, int64_t tile,
    const std::function<void(int64_t, int64_t, int64_t, int64_t, uint8_t*)>& fill) {
  TESSERA_CHECK(tile >= 16 && tile % 16 == 0, "TIFF tiles must be a multiple of 16, got ", tile);
  TESSERA_CHECK(height > 0 && width > 0, "a slide needs a size, got ", height, " x ", width);
  quiet_tiff();
  TIFF* t = TIFFOpen(path.c_str(), "w8");  // BigTIFF: slides pass 4 GiB
  TESSERA_CHECK(t != nullptr, "cannot write slide '", path, "'");
  TIFFSetField(t, TIFFTAG_IMAGEWIDTH, static_cast<uint32_t>(width));
  TIFFSetField(t, TIFFTAG_IMAGELENGTH, static_cast<uint32_t>(height));
  TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 3);
  TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 8);
  TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_RGB);
  TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(t, TIFFTAG_COMPRESSION, COMPRESSION_ADOBE_DEFLATE);
  TIFFSetField(t, TIFFTAG_TILEWIDTH, static_cast<uint32_t>(tile));
  TIFFSetField(t, TIFFTAG_TILELENGTH, static_cast<uint32_t>(tile));
  std::vector<uint8_t> buf(static_cast<size_t>(tile * tile * 3));
  bool ok = true;
  for (int64_t ty = 0; ty < height && ok; ty += tile) {
    for (int64_t tx = 0; tx < width && ok; tx += tile) {
      // Edge tiles are padded to the full tile size (TIFF's rule); the padding is black.
      std::fill(buf.begin(), buf.end(), 0);
      const int64_t h = std::min(tile, height - ty), w = std::min(tile, width - tx);
      std::vector<uint8_t> part(static_cast<size_t>(h * w * 3));
      fill(ty, tx, h, w, part.data());
      for (int64_t r = 0; r < h; ++r) {
        std::memcpy(buf.data() + r * tile * 3, part.data() + r * w * 3, static_cast<size_t>(w * 3));
      }
      ok = TIFFWriteTile(t, buf.data(), static_cast<uint32_t>(tx), static_cast<uint32_t>(ty), 0,
                         0) >= 0;
    }
  }
  TIFFClose(t);
  TESSERA_CHECK(ok, "writing slide '", path, "' failed");
}

}  // namespace data
}  // namespace tessera
