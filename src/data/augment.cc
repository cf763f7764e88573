#include "data/augment.h"

#include <cmath>
#include <opencv2/imgproc.hpp>

#include "common/error.h"

namespace tessera {
namespace data {
namespace {

cv::Mat as_mat(const torch::Tensor& t) {
  // Wraps (no copy) a contiguous [H, W, C] or [H, W] u8 tensor.
  const int channels = t.dim() == 3 ? static_cast<int>(t.size(2)) : 1;
  return cv::Mat(static_cast<int>(t.size(0)), static_cast<int>(t.size(1)), CV_8UC(channels),
                 t.data_ptr());
}

torch::Tensor to_tensor(const cv::Mat& m) {
  const int64_t c = m.channels();
  torch::Tensor t = c == 1 ? torch::empty({m.rows, m.cols}, torch::kUInt8)
                           : torch::empty({m.rows, m.cols, c}, torch::kUInt8);
  cv::Mat dst = as_mat(t);
  m.copyTo(dst);
  return t;
}

void check_image(const torch::Tensor& image) {
  TESSERA_CHECK(image.dim() == 3 && image.size(2) == 3 && image.scalar_type() == torch::kUInt8,
                "expected an image [H, W, 3] u8, got ", image.sizes());
}

// Crops [y, y+size) x [x, x+size) of a normalised image and its mask, padding outside with 0
// (the mean) and 255.
std::pair<torch::Tensor, torch::Tensor> crop_padded(const torch::Tensor& chw,
                                                    const torch::Tensor& mask, int64_t y, int64_t x,
                                                    int64_t size) {
  torch::Tensor out_image = torch::zeros({3, size, size});
  torch::Tensor out_mask = torch::full({size, size}, int64_t{255}, torch::kLong);
  const int64_t h = chw.size(1), w = chw.size(2);
  const int64_t y0 = std::max<int64_t>(0, y), y1 = std::min(h, y + size);
  const int64_t x0 = std::max<int64_t>(0, x), x1 = std::min(w, x + size);
  if (y1 > y0 && x1 > x0) {
    out_image.slice(1, y0 - y, y1 - y)
        .slice(2, x0 - x, x1 - x)
        .copy_(chw.slice(1, y0, y1).slice(2, x0, x1));
    out_mask.slice(0, y0 - y, y1 - y)
        .slice(1, x0 - x, x1 - x)
        .copy_(mask.slice(0, y0, y1).slice(1, x0, x1).to(torch::kLong));
  }
  return {out_image, out_mask};
}

void check_pair(const torch::Tensor& image, const torch::Tensor& mask, const std::string& source) {
  check_image(image);
  TESSERA_CHECK(mask.dim() == 2 && mask.size(0) == image.size(0) && mask.size(1) == image.size(1),
                "'", source, "': the mask is ", mask.sizes(), " but the image is ",
                image.sizes().slice(0, 2), "; a mask must have its image's size");
}

}  // namespace

torch::Tensor augment_classification(const torch::Tensor& image, const ClassificationAugment& a,
                                     std::mt19937_64& rng) {
  check_image(image);
  const torch::Tensor img = image.contiguous();
  const double h = static_cast<double>(img.size(0)), w = static_cast<double>(img.size(1));
  std::uniform_real_distribution<double> area(a.min_area, a.max_area);
  std::uniform_real_distribution<double> log_ratio(std::log(a.min_ratio), std::log(a.max_ratio));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int64_t cw = static_cast<int64_t>(w), ch = static_cast<int64_t>(h), cx = 0, cy = 0;
  for (int attempt = 0; attempt < 10; ++attempt) {  // torchvision's rule, then the fallback
    const double target = area(rng) * h * w, ratio = std::exp(log_ratio(rng));
    const int64_t tw = std::llround(std::sqrt(target * ratio));
    const int64_t th = std::llround(std::sqrt(target / ratio));
    if (tw > 0 && th > 0 && tw <= w && th <= h) {
      cw = tw;
      ch = th;
      cx = static_cast<int64_t>(unit(rng) * static_cast<double>(static_cast<int64_t>(w) - tw + 1));
      cy = static_cast<int64_t>(unit(rng) * static_cast<double>(static_cast<int64_t>(h) - th + 1));
      break;
    }
  }
  cv::Mat crop = as_mat(img)(cv::Rect(static_cast<int>(cx), static_cast<int>(cy),
                                      static_cast<int>(cw), static_cast<int>(ch)));
  cv::Mat resized;
  cv::resize(crop, resized, cv::Size(static_cast<int>(a.size), static_cast<int>(a.size)), 0, 0,
             cv::INTER_LINEAR);
  if (a.flip && (rng() & 1)) cv::flip(resized, resized, 1);
  return normalize(to_tensor(resized), a.norm);
}

torch::Tensor eval_classification(const torch::Tensor& image, const ClassificationAugment& a) {
  check_image(image);
  const torch::Tensor img = image.contiguous();
  const double short_side = static_cast<double>(std::min(img.size(0), img.size(1)));
  const double scale = static_cast<double>(a.size) * 256.0 / 224.0 / short_side;
  cv::Mat resized;
  cv::resize(as_mat(img), resized,
             cv::Size(static_cast<int>(std::lround(img.size(1) * scale)),
                      static_cast<int>(std::lround(img.size(0) * scale))),
             0, 0, cv::INTER_LINEAR);
  const int x = (resized.cols - static_cast<int>(a.size)) / 2;
  const int y = (resized.rows - static_cast<int>(a.size)) / 2;
  cv::Mat crop = resized(cv::Rect(x, y, static_cast<int>(a.size), static_cast<int>(a.size)));
  return normalize(to_tensor(crop), a.norm);
}

std::pair<torch::Tensor, torch::Tensor> augment_segmentation(const torch::Tensor& image,
                                                             const torch::Tensor& mask,
                                                             const SegmentationAugment& a,
                                                             std::mt19937_64& rng,
                                                             const std::string& source) {
  check_pair(image, mask, source);
  const torch::Tensor img = image.contiguous(), msk = mask.contiguous();
  std::uniform_real_distribution<double> scale_dist(a.min_scale, a.max_scale);
  const double s = a.min_scale == a.max_scale ? a.min_scale : scale_dist(rng);
  const cv::Size size(std::max(1, static_cast<int>(std::lround(img.size(1) * s))),
                      std::max(1, static_cast<int>(std::lround(img.size(0) * s))));
  cv::Mat im = as_mat(img), mk = as_mat(msk);
  cv::Mat im_s, mk_s;
  if (size.width != im.cols || size.height != im.rows) {
    cv::resize(im, im_s, size, 0, 0, cv::INTER_LINEAR);
    cv::resize(mk, mk_s, size, 0, 0, cv::INTER_NEAREST);  // labels are never blended
  } else {
    im_s = im;
    mk_s = mk;
  }
  if (a.flip && (rng() & 1)) {
    cv::Mat fi, fm;
    cv::flip(im_s, fi, 1);
    cv::flip(mk_s, fm, 1);
    im_s = fi;
    mk_s = fm;
  }
  // A crop window anywhere that keeps some of the image; beyond its border is padding.
  const int64_t h = im_s.rows, w = im_s.cols;
  std::uniform_int_distribution<int64_t> ys(std::min<int64_t>(0, h - a.crop),
                                            std::max<int64_t>(0, h - a.crop));
  std::uniform_int_distribution<int64_t> xs(std::min<int64_t>(0, w - a.crop),
                                            std::max<int64_t>(0, w - a.crop));
  const int64_t y = ys(rng), x = xs(rng);
  return crop_padded(normalize(to_tensor(im_s), a.norm), to_tensor(mk_s), y, x, a.crop);
}

std::pair<torch::Tensor, torch::Tensor> eval_segmentation(const torch::Tensor& image,
                                                          const torch::Tensor& mask,
                                                          const SegmentationAugment& a,
                                                          const std::string& source) {
  check_pair(image, mask, source);
  const int64_t y = (image.size(0) - a.crop) / 2, x = (image.size(1) - a.crop) / 2;
  return crop_padded(normalize(image.contiguous(), a.norm), mask.contiguous(), y, x, a.crop);
}

}  // namespace data
}  // namespace tessera
