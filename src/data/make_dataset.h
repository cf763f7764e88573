// `tessera make-dataset`: synthetic data sets written as real files, so the readers, the codecs
// and the pipeline are exercised end to end (and the demo trains on files).
//
//   shapes   Pascal VOC layout: JPEGImages/<id>.jpg, SegmentationClass/<id>.png (palette PNGs,
//            VOC colour map), ImageSets/Segmentation/{train,val}.txt, classes.txt
//            (background, circle, square, triangle).
//   classes  class folders train/<class>/ and val/<class>/ (alternately .jpg and .png), the same
//            samples in train.csv / val.csv manifests, classes.txt (circle, square, triangle):
//            the class of a sample is the kind of its largest shape, class i % 3 for sample i, so
//            every class is in both splits (the val split has at least 3 samples).
//   slides   whole-slide images for spatial decomposition: slides/<id>.tif (tiled TIFFs of
//            image-size², deflate), train.csv / val.csv (path,label), classes.txt (squares,
//            crosses). Every 64x64 cell holds one small dark blob on a noisy pink ground: a 3x3
//            square (class 0) or a 5x5 cross of the same 9 pixels (class 1); sample i has class
//            i % 2. Only full resolution tells them apart: 16x average pooling leaves both
//            classes with the same dark mass per block.
// Images are coloured shapes on textured backgrounds (stripes, checks, waves, noise). Sample i is
// a pure function of (seed, i). The split files are written last, so a folder whose val split
// file exists is complete.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace tessera {
namespace data {

struct MakeDatasetOptions {
  std::string kind = "shapes";  // shapes | classes | slides
  std::string out;
  int64_t size = 1000;  // samples in all; the last val_fraction of them form the val split
  int64_t image_size = 96;
  double val_fraction = 0.1;
  uint64_t seed = 1;
};

struct MakeDatasetResult {
  int64_t train = 0, val = 0;
  uint64_t bytes = 0;  // written, all files together
};

// Throws InvalidArgument for bad options or a folder that cannot be written.
MakeDatasetResult make_dataset(const MakeDatasetOptions& options);

struct RenderedSample {
  torch::Tensor image;  // [S, S, 3] u8 RGB
  torch::Tensor mask;   // [S, S] u8: 0 background, 1 circle, 2 square, 3 triangle
  int64_t label = 0;    // 0 circle, 1 square, 2 triangle: the kind of the largest shape
};
// `largest` (1..3) fixes the kind of the largest shape; 0 draws it like the others.
RenderedSample render_textured_shapes(uint64_t seed, int64_t index, int64_t image_size,
                                      int largest = 0);

// Pixel (y, x) of slide `index` of class `label` (0 squares, 1 crosses) as RGB, and a tile's
// worth [h, w, 3] row-major into `out`: what make-dataset slides writes.
void render_slide_tile(uint64_t seed, int64_t index, int64_t label, int64_t y, int64_t x, int64_t h,
                       int64_t w, uint8_t* out);

}  // namespace data
}  // namespace tessera
