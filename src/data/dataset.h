// A data set on disk as training sees it: one split (train or val) of one layout, with its
// number of classes and its task. The layouts per format:
//   folder      ROOT/train/<class>/*.{jpg,png} and ROOT/val/<class>/... (ImageNet)
//   csv         ROOT/train.csv and ROOT/val.csv ("path,label" lines, paths relative to ROOT)
//   voc         Pascal VOC: ROOT/ImageSets/Segmentation/{train,val}.txt, JPEGImages/,
//               SegmentationClass/ (palette PNGs)
//   cityscapes  ROOT/leftImg8bit/{train,val}/..., ROOT/gtFine/{train,val}/..._labelIds.png
// Class names: the folder names (folder); ROOT/classes.txt, one name per line, if present
// (csv, voc), else the labels 0..max (csv) or Pascal VOC's 21 classes (voc); the 19 train ids
// (cityscapes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/formats.h"

namespace tessera {
namespace data {

enum class Format { kFolder, kCsv, kVoc, kCityscapes };
// Throws InvalidArgument listing the accepted names.
Format parse_format(const std::string& name);
const char* format_name(Format format);

struct DataSet {
  SampleList list;
  int64_t num_classes = 0;
  bool segmentation = false;
  Format format = Format::kFolder;
  std::string root, split;
};

// Throws InvalidArgument naming the missing folder or file and the layout expected.
DataSet open_dataset(const std::string& root, Format format, const std::string& split);

}  // namespace data
}  // namespace tessera
