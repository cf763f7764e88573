// Image and mask decoding on bytes the test encodes itself: channel order, exact PNG round
// trips, palette indices kept as labels, grayscale label images, and corrupt data refused.
#include <gtest/gtest.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "common/error.h"
#include "data/image_codec.h"

namespace tessera {
namespace data {
namespace {

std::string encode(const cv::Mat& m, const std::string& ext) {
  std::vector<uchar> buf;
  EXPECT_TRUE(cv::imencode(ext, m, buf));
  return std::string(buf.begin(), buf.end());
}

std::vector<uchar> bytes_of(const std::string& s) { return std::vector<uchar>(s.begin(), s.end()); }

// An 8-bit BGR image as the H x W x 3 RGB tensor decode_image returns.
torch::Tensor as_rgb_tensor(const cv::Mat& bgr) {
  EXPECT_EQ(bgr.type(), CV_8UC3);
  cv::Mat rgb;
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  return torch::from_blob(rgb.data, {rgb.rows, rgb.cols, 3}, torch::kUInt8).clone();
}

// A 5x7 image whose pixel (y, x) is RGB (10y, 20x, 200 - 5x - 3y).
cv::Mat pattern_bgr() {
  cv::Mat m(5, 7, CV_8UC3);
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 7; ++x) {
      m.at<cv::Vec3b>(y, x) = cv::Vec3b(static_cast<uchar>(200 - 5 * x - 3 * y),
                                        static_cast<uchar>(20 * x), static_cast<uchar>(10 * y));
    }
  }
  return m;
}

TEST(ImageCodec, PngDecodesExactlyAsRgb) {
  torch::Tensor t = decode_image(encode(pattern_bgr(), ".png"), "p.png");
  ASSERT_EQ(t.sizes(), (std::vector<int64_t>{5, 7, 3}));
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 7; ++x) {
      EXPECT_EQ(t[y][x][0].item<int>(), 10 * y);
      EXPECT_EQ(t[y][x][1].item<int>(), 20 * x);
      EXPECT_EQ(t[y][x][2].item<int>(), 200 - 5 * x - 3 * y);
    }
  }
}

TEST(ImageCodec, JpegDecodesCloseToTheOriginal) {
  cv::Mat big;
  cv::resize(pattern_bgr(), big, cv::Size(70, 50), 0, 0, cv::INTER_NEAREST);
  const std::string jpg = encode(big, ".jpg");
  torch::Tensor t = decode_image(jpg, "p.jpg");
  ASSERT_EQ(t.sizes(), (std::vector<int64_t>{50, 70, 3}));
  // Red channel grows with y, green with x (RGB order, not OpenCV's BGR).
  EXPECT_GT(t[45][5][0].item<int>(), t[5][5][0].item<int>() + 20);
  EXPECT_GT(t[5][65][1].item<int>(), t[5][5][1].item<int>() + 60);
  // Every pixel is libjpeg's own decode, channels reversed, and near the original.
  EXPECT_TRUE(torch::equal(t, as_rgb_tensor(cv::imdecode(bytes_of(jpg), cv::IMREAD_COLOR))));
  const torch::Tensor diff = (t.to(torch::kInt) - as_rgb_tensor(big).to(torch::kInt)).abs();
  EXPECT_LT(diff.to(torch::kDouble).mean().item<double>(), 4.0) << "mean error in levels";
}

TEST(ImageCodec, PaletteMaskKeepsIndices) {
  torch::Tensor mask = torch::zeros({6, 9}, torch::kUInt8);
  for (int i = 0; i < 54; ++i) mask.view(-1)[i] = static_cast<uint8_t>(i % 21);
  mask[0][0] = 255;  // VOC's "ignore"
  torch::Tensor back = decode_mask(encode_palette_png(mask), "m.png");
  EXPECT_TRUE(torch::equal(back, mask));
  // The VOC colour map: 1 is (128, 0, 0), 15 (person) (192, 128, 128), 255 (224, 224, 192).
  EXPECT_EQ(voc_color(1), (std::array<uint8_t, 3>{128, 0, 0}));
  EXPECT_EQ(voc_color(15), (std::array<uint8_t, 3>{192, 128, 128}));
  EXPECT_EQ(voc_color(255), (std::array<uint8_t, 3>{224, 224, 192}));
}

TEST(ImageCodec, GrayscaleLabelImage) {
  cv::Mat ids(3, 4, CV_8UC1);
  for (int i = 0; i < 12; ++i) ids.data[i] = static_cast<uchar>(i * 3);
  torch::Tensor back = decode_mask(encode(ids, ".png"), "labelIds.png");
  for (int i = 0; i < 12; ++i) EXPECT_EQ(back.view(-1)[i].item<int>(), i * 3);
}

TEST(ImageCodec, CorruptDataIsAnErrorNamingTheSource) {
  const std::string png = encode(pattern_bgr(), ".png");
  try {
    decode_image(png.substr(0, 20), "cut.png");
    FAIL();
  } catch (const CorruptImage& e) {
    EXPECT_NE(std::string(e.what()).find("'cut.png' cannot be decoded"), std::string::npos);
  }
  const std::string mask = encode_palette_png(torch::ones({4, 4}, torch::kUInt8));
  try {
    decode_mask(mask.substr(0, mask.size() - 30), "cut_mask.png");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'cut_mask.png' cannot be decoded"), std::string::npos)
        << e.what();
  }
  try {
    decode_mask(png, "rgb.png");  // a colour PNG is not a label image
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("accepted: palette or 8-bit grayscale"),
              std::string::npos);
  }
  EXPECT_THROW(decode_mask("GIF89a....", "x.gif"), CorruptImage);
  // libjpeg would decode a cut JPEG with grey rows and a warning; it is refused instead (a few
  // bytes of padding after the end marker are fine).
  const std::string jpg = encode(pattern_bgr(), ".jpg");
  EXPECT_TRUE(torch::equal(decode_image(jpg + std::string(8, '\0'), "padded.jpg"),
                           as_rgb_tensor(cv::imdecode(bytes_of(jpg), cv::IMREAD_COLOR))));
  try {
    decode_image(jpg.substr(0, jpg.size() * 2 / 3), "cut.jpg");
    FAIL();
  } catch (const CorruptImage& e) {
    EXPECT_NE(std::string(e.what()).find("'cut.jpg' is a truncated JPEG"), std::string::npos);
  }
  EXPECT_THROW(decode_image("", "empty.jpg"), InvalidArgument);
}

}  // namespace
}  // namespace data
}  // namespace tessera
