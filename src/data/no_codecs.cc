// A build without image libraries (TESSERA_IMAGE_CODECS=OFF: no OpenCV, libpng or libtiff, as on
// the GPU test machine): the data pipeline trains on the built-in synthetic data, and every call
// that would read or write an image file says why it cannot.
#include "common/error.h"
#include "data/augment.h"
#include "data/image_codec.h"
#include "data/make_dataset.h"
#include "data/slide.h"

namespace tessera {
namespace data {
namespace {

[[noreturn]] void no_codecs(const std::string& what) {
  throw InvalidArgument(what +
                        ": this tessera was built without image libraries "
                        "(TESSERA_IMAGE_CODECS=OFF: no OpenCV, libpng or libtiff), so it trains "
                        "on --data synthetic only; build it with them to use image files");
}

}  // namespace

torch::Tensor augment_classification(const torch::Tensor&, const ClassificationAugment&,
                                     std::mt19937_64&) {
  no_codecs("augmenting an image");
}
torch::Tensor eval_classification(const torch::Tensor&, const ClassificationAugment&) {
  no_codecs("resizing an image");
}
std::pair<torch::Tensor, torch::Tensor> augment_segmentation(const torch::Tensor&,
                                                             const torch::Tensor&,
                                                             const SegmentationAugment&,
                                                             std::mt19937_64&,
                                                             const std::string& source) {
  no_codecs("augmenting '" + source + "'");
}
std::pair<torch::Tensor, torch::Tensor> eval_segmentation(const torch::Tensor&,
                                                          const torch::Tensor&,
                                                          const SegmentationAugment&,
                                                          const std::string& source) {
  no_codecs("cropping '" + source + "'");
}

torch::Tensor decode_image(const std::string&, const std::string& source) {
  no_codecs("decoding '" + source + "'");
}
torch::Tensor decode_mask(const std::string&, const std::string& source) {
  no_codecs("decoding '" + source + "'");
}
std::string encode_palette_png(const torch::Tensor&) { no_codecs("writing a PNG mask"); }
std::string encode_png(const torch::Tensor&) { no_codecs("writing a PNG picture"); }
std::array<uint8_t, 3> voc_color(int) { no_codecs("the VOC colour map (PNG masks)"); }

struct SlideReader::Tiff {};
SlideReader::SlideReader(const std::string& path) : path_(path) {
  no_codecs("reading slide '" + path + "'");
}
SlideReader::~SlideReader() = default;
torch::Tensor SlideReader::read_region(int64_t, int64_t, int64_t, int64_t) {
  no_codecs("reading slide '" + path_ + "'");
}
void write_tiled_tiff(const std::string& path, int64_t, int64_t, int64_t,
                      const std::function<void(int64_t, int64_t, int64_t, int64_t, uint8_t*)>&) {
  no_codecs("writing slide '" + path + "'");
}

MakeDatasetResult make_dataset(const MakeDatasetOptions& o) {
  no_codecs("tessera make-dataset " + o.kind);
}
RenderedSample render_textured_shapes(uint64_t, int64_t, int64_t, int) {
  no_codecs("rendering a sample of make-dataset");
}
void render_slide_tile(uint64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, uint8_t*) {
  no_codecs("rendering a slide of make-dataset");
}

}  // namespace data
}  // namespace tessera
