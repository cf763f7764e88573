// Data-set layouts on disk: each reader lists the samples (file paths and labels) of one
// layout, in a deterministic order, and checks the layout as it goes: a missing split file, an
// empty class folder, a manifest line without a label or an image without its mask is an
// InvalidArgument naming the file. Decoding is elsewhere; these only list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {
namespace data {

struct Sample {
  std::string image;
  std::string mask;    // segmentation: the label image; empty for classification
  int64_t label = -1;  // classification: the class index; -1 for segmentation
};

struct SampleList {
  std::vector<Sample> samples;
  std::vector<std::string> classes;  // classification: class names by index
};

// root/<class>/*.{jpg,jpeg,png} (ImageNet layout): classes are the sorted folder names, files
// sorted within each.
SampleList list_folder(const std::string& root);
// A CSV manifest of "path,label" lines (an optional header "path,label" is skipped); relative
// paths are taken from the manifest's folder. Labels are integers >= 0.
SampleList list_csv(const std::string& manifest);
// Pascal VOC: ImageSets/Segmentation/<split>.txt lists ids; images JPEGImages/<id>.jpg, masks
// SegmentationClass/<id>.png (palette PNGs; 255 is ignored).
SampleList list_voc(const std::string& root, const std::string& split);
// Cityscapes: leftImg8bit/<split>/<city>/<name>_leftImg8bit.png with
// gtFine/<split>/<city>/<name>_gtFine_labelIds.png (label ids, mapped by cityscapes_train_id).
SampleList list_cityscapes(const std::string& root, const std::string& split);

// Cityscapes label id (0..33, or -1 for license plate) to its train id (0..18), 255 for the
// ids that are not evaluated. The official table (cityscapesScripts' labels.py).
uint8_t cityscapes_train_id(int label_id);
constexpr int64_t kCityscapesClasses = 19;

}  // namespace data
}  // namespace tessera
