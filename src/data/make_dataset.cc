#include "data/make_dataset.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <random>

#include "common/error.h"
#include "data/image_codec.h"
#include "data/shape.h"
#include "data/slide.h"

namespace tessera {
namespace data {
namespace {
namespace fs = std::filesystem;

void write_bytes(const fs::path& p, const std::string& bytes, uint64_t* total) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  TESSERA_CHECK(f.good(), "make-dataset: cannot write '", p.string(), "'");
  *total += bytes.size();
}

std::string encode_rgb(const torch::Tensor& rgb, const std::string& ext) {
  torch::Tensor c = rgb.contiguous();
  cv::Mat m(static_cast<int>(c.size(0)), static_cast<int>(c.size(1)), CV_8UC3,
            c.data_ptr<uint8_t>());
  cv::Mat bgr;
  cv::cvtColor(m, bgr, cv::COLOR_RGB2BGR);
  std::vector<uchar> buf;
  std::vector<int> params;
  if (ext == ".jpg") params = {cv::IMWRITE_JPEG_QUALITY, 92};
  TESSERA_CHECK(cv::imencode(ext, bgr, buf, params), "make-dataset: OpenCV cannot encode ", ext);
  return std::string(buf.begin(), buf.end());
}

std::string id_of(int64_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%06lld", static_cast<long long>(i));
  return buf;
}

}  // namespace

RenderedSample render_textured_shapes(uint64_t seed, int64_t index, int64_t image_size,
                                      int largest) {
  std::mt19937_64 rng(mix_seed(seed * 0x100000001b3ull ^ mix_seed(static_cast<uint64_t>(index))));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int64_t s = image_size;
  std::vector<Shape> shapes = random_shapes(rng, s);
  if (largest != 0) shapes.front().kind = largest;
  // The background: two dark colours mixed by a texture (stripes at an angle, checks, or
  // crossed waves) plus pixel noise, so that colour alone does not separate shape from ground.
  const int texture = static_cast<int>(rng() % 3);
  const double angle = unit(rng) * M_PI, period = s * (0.05 + 0.15 * unit(rng));
  std::array<double, 3> c0, c1;
  for (size_t ch = 0; ch < 3; ++ch) {
    c0[ch] = 0.35 * unit(rng);
    c1[ch] = 0.35 * unit(rng);
  }
  RenderedSample out;
  out.label = shapes.front().kind - 1;
  out.image = torch::empty({s, s, 3}, torch::kUInt8);
  out.mask = torch::empty({s, s}, torch::kUInt8);
  uint8_t* img = out.image.data_ptr<uint8_t>();
  uint8_t* msk = out.mask.data_ptr<uint8_t>();
  for (int64_t y = 0; y < s; ++y) {
    for (int64_t x = 0; x < s; ++x) {
      const double u = x * std::cos(angle) + y * std::sin(angle);
      const double v = -x * std::sin(angle) + y * std::cos(angle);
      double t;
      switch (texture) {
        case 0:
          t = 0.5 + 0.5 * std::sin(2 * M_PI * u / period);
          break;
        case 1:
          t = ((static_cast<int64_t>(std::floor(u / period)) +
                static_cast<int64_t>(std::floor(v / period))) &
               1)
                  ? 1.0
                  : 0.0;
          break;
        default:
          t = 0.5 + 0.25 * std::sin(2 * M_PI * u / period) +
              0.25 * std::sin(2 * M_PI * v / (1.7 * period));
      }
      int kind = 0;
      std::array<double, 3> c;
      for (size_t ch = 0; ch < 3; ++ch) c[ch] = c0[ch] * (1 - t) + c1[ch] * t;
      for (const Shape& sh : shapes) {
        if (sh.contains(x + 0.5, y + 0.5)) {
          kind = sh.kind;
          c = sh.color;
        }
      }
      const size_t p = static_cast<size_t>(y * s + x);
      msk[p] = static_cast<uint8_t>(kind);
      for (size_t ch = 0; ch < 3; ++ch) {
        const double value = c[ch] + 0.2 * (unit(rng) - 0.5);
        img[p * 3 + ch] = static_cast<uint8_t>(std::lround(std::clamp(value, 0.0, 1.0) * 255));
      }
    }
  }
  return out;
}

void render_slide_tile(uint64_t seed, int64_t index, int64_t label, int64_t y, int64_t x, int64_t h,
                       int64_t w, uint8_t* out) {
  constexpr int64_t kCell = 64;
  const uint64_t base = mix_seed(seed * 0x100000001b3ull ^ mix_seed(static_cast<uint64_t>(index)));
  for (int64_t r = 0; r < h; ++r) {
    for (int64_t c = 0; c < w; ++c) {
      const int64_t gy = y + r, gx = x + c;
      // The blob of this pixel's cell, at an offset drawn from (slide, cell).
      const int64_t cy = gy / kCell, cx = gx / kCell;
      const uint64_t cell =
          mix_seed(base ^ mix_seed(static_cast<uint64_t>(cy) << 32 ^ static_cast<uint64_t>(cx)));
      const int64_t by = cy * kCell + 8 + static_cast<int64_t>(cell % 48);
      const int64_t bx = cx * kCell + 8 + static_cast<int64_t>((cell >> 16) % 48);
      const int64_t dy = gy - by, dx = gx - bx;
      const bool blob = label == 0
                            ? (std::abs(dy) <= 1 && std::abs(dx) <= 1)
                            : ((dy == 0 && std::abs(dx) <= 2) || (dx == 0 && std::abs(dy) <= 2));
      const uint64_t noise = mix_seed(base ^ static_cast<uint64_t>(gy) * 0x9e3779b97f4a7c15ull ^
                                      static_cast<uint64_t>(gx));
      uint8_t* p = out + (r * w + c) * 3;
      const int n = static_cast<int>(noise % 24);
      if (blob) {
        p[0] = static_cast<uint8_t>(70 + n);
        p[1] = static_cast<uint8_t>(30 + n);
        p[2] = static_cast<uint8_t>(90 + n);
      } else {
        p[0] = static_cast<uint8_t>(220 + n);
        p[1] = static_cast<uint8_t>(170 + n);
        p[2] = static_cast<uint8_t>(200 + n);
      }
    }
  }
}

MakeDatasetResult make_dataset(const MakeDatasetOptions& o) {
  TESSERA_CHECK(o.kind == "shapes" || o.kind == "classes" || o.kind == "slides", "make-dataset '",
                o.kind, "' is not known; accepted: shapes, classes, slides");
  TESSERA_CHECK(!o.out.empty(), "make-dataset needs --out DIR");
  TESSERA_CHECK(o.size >= 2, "--size must be >= 2 (a train and a val sample), got ", o.size);
  TESSERA_CHECK(o.image_size >= 16, "--image-size must be >= 16, got ", o.image_size);
  TESSERA_CHECK(o.val_fraction > 0 && o.val_fraction < 1, "--val-fraction must be in (0, 1), got ",
                o.val_fraction);
  // The classes set needs every class in each split.
  const int64_t min_split = o.kind == "classes" ? 3 : o.kind == "slides" ? 2 : 1;
  TESSERA_CHECK(o.size >= 2 * min_split, "--size must be >= ", 2 * min_split, " for ", o.kind,
                " (every split needs ", min_split, " sample", min_split > 1 ? "s" : "", "), got ",
                o.size);
  const int64_t val =
      std::clamp<int64_t>(std::llround(o.size * o.val_fraction), min_split, o.size - min_split);
  MakeDatasetResult r;
  r.train = o.size - val;
  r.val = val;
  const fs::path root(o.out);
  std::error_code ec;
  fs::create_directories(root, ec);
  TESSERA_CHECK(!ec, "make-dataset: cannot create '", root.string(), "': ", ec.message());
  auto split_of = [&](int64_t i) { return i < r.train ? "train" : "val"; };

  if (o.kind == "shapes") {
    fs::create_directories(root / "JPEGImages");
    fs::create_directories(root / "SegmentationClass");
    fs::create_directories(root / "ImageSets" / "Segmentation");
    std::string train_ids, val_ids;
    for (int64_t i = 0; i < o.size; ++i) {
      RenderedSample s = render_textured_shapes(o.seed, i, o.image_size);
      write_bytes(root / "JPEGImages" / (id_of(i) + ".jpg"), encode_rgb(s.image, ".jpg"), &r.bytes);
      write_bytes(root / "SegmentationClass" / (id_of(i) + ".png"), encode_palette_png(s.mask),
                  &r.bytes);
      (i < r.train ? train_ids : val_ids) += id_of(i) + "\n";
    }
    write_bytes(root / "classes.txt", "background\ncircle\nsquare\ntriangle\n", &r.bytes);
    write_bytes(root / "ImageSets" / "Segmentation" / "train.txt", train_ids, &r.bytes);
    write_bytes(root / "ImageSets" / "Segmentation" / "val.txt", val_ids, &r.bytes);
    return r;
  }
  if (o.kind == "slides") {
    TESSERA_CHECK(
        o.image_size >= 256 && o.image_size % 256 == 0,
        "make-dataset slides: --image-size must be a multiple of 256 (the TIFF tile), got ",
        o.image_size);
    fs::create_directories(root / "slides");
    std::string train_csv = "path,label\n", val_csv = "path,label\n";
    for (int64_t i = 0; i < o.size; ++i) {
      const int64_t label = i % 2;
      const fs::path rel = fs::path("slides") / (id_of(i) + ".tif");
      write_tiled_tiff((root / rel).string(), o.image_size, o.image_size, 256,
                       [&](int64_t y, int64_t x, int64_t h, int64_t w, uint8_t* out) {
                         render_slide_tile(o.seed, i, label, y, x, h, w, out);
                       });
      r.bytes += fs::file_size(root / rel);
      (i < r.train ? train_csv : val_csv) += rel.string() + "," + std::to_string(label) + "\n";
    }
    write_bytes(root / "classes.txt", "squares\ncrosses\n", &r.bytes);
    write_bytes(root / "train.csv", train_csv, &r.bytes);
    write_bytes(root / "val.csv", val_csv, &r.bytes);
    return r;
  }
  const char* const names[3] = {"circle", "square", "triangle"};
  for (const char* split : {"train", "val"}) {
    for (const char* n : names) fs::create_directories(root / split / n);
  }
  std::string train_csv = "path,label\n", val_csv = "path,label\n";
  for (int64_t i = 0; i < o.size; ++i) {
    RenderedSample s = render_textured_shapes(o.seed, i, o.image_size, static_cast<int>(i % 3) + 1);
    const std::string ext = i % 2 == 0 ? ".jpg" : ".png";
    const fs::path rel = fs::path(split_of(i)) / names[s.label] / (id_of(i) + ext);
    write_bytes(root / rel, encode_rgb(s.image, ext), &r.bytes);
    (i < r.train ? train_csv : val_csv) += rel.string() + "," + std::to_string(s.label) + "\n";
  }
  write_bytes(root / "classes.txt", "circle\nsquare\ntriangle\n", &r.bytes);
  write_bytes(root / "train.csv", train_csv, &r.bytes);
  write_bytes(root / "val.csv", val_csv, &r.bytes);
  return r;
}

}  // namespace data
}  // namespace tessera
