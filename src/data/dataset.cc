#include "data/dataset.h"

#include <filesystem>

#include "common/error.h"
#include "data/lists.h"

namespace tessera {
namespace data {
namespace {
namespace fs = std::filesystem;

// Pascal VOC 2012's classes, in label order.
const char* const kVocClasses[] = {
    "background", "aeroplane", "bicycle",     "bird",  "boat",        "bottle", "bus",
    "car",        "cat",       "chair",       "cow",   "diningtable", "dog",    "horse",
    "motorbike",  "person",    "pottedplant", "sheep", "sofa",        "train",  "tvmonitor"};

// ROOT/classes.txt if present (one name per line, blank lines skipped), else empty.
std::vector<std::string> read_class_file(const std::string& root) {
  const fs::path p = fs::path(root) / "classes.txt";
  if (!fs::exists(p)) return {};
  return parse_class_names(read_text_file(p.string(), "class file"), p.string());
}

}  // namespace

Format parse_format(const std::string& name) {
  if (name == "folder") return Format::kFolder;
  if (name == "csv") return Format::kCsv;
  if (name == "voc") return Format::kVoc;
  if (name == "cityscapes") return Format::kCityscapes;
  throw InvalidArgument("--format '" + name + "' is not known; accepted: folder, csv, voc, " +
                        "cityscapes");
}

const char* format_name(Format format) {
  switch (format) {
    case Format::kFolder:
      return "folder";
    case Format::kCsv:
      return "csv";
    case Format::kVoc:
      return "voc";
    case Format::kCityscapes:
      return "cityscapes";
  }
  return "?";
}

DataSet open_dataset(const std::string& root, Format format, const std::string& split) {
  TESSERA_CHECK(fs::is_directory(root), "--data '", root, "' is not a folder (the ",
                format_name(format), " format reads a folder)");
  DataSet d;
  d.format = format;
  d.root = root;
  d.split = split;
  switch (format) {
    case Format::kFolder: {
      const fs::path dir = fs::path(root) / split;
      TESSERA_CHECK(fs::is_directory(dir), "'", dir.string(),
                    "' is missing: the folder format reads ROOT/train/<class>/ and "
                    "ROOT/val/<class>/");
      d.list = list_folder(dir.string());
      d.num_classes = static_cast<int64_t>(d.list.classes.size());
      break;
    }
    case Format::kCsv: {
      const fs::path manifest = fs::path(root) / (split + ".csv");
      TESSERA_CHECK(fs::is_regular_file(manifest), "'", manifest.string(),
                    "' is missing: the csv format reads ROOT/train.csv and ROOT/val.csv");
      d.list = list_csv(manifest.string());
      std::vector<std::string> names = read_class_file(root);
      if (!names.empty()) d.list.classes = names;
      d.num_classes = static_cast<int64_t>(d.list.classes.size());
      for (const Sample& s : d.list.samples) {
        TESSERA_CHECK(s.label < d.num_classes, manifest.string(), ": '", s.image, "' has label ",
                      s.label, ", outside the ", d.num_classes, " classes of ", root,
                      "/classes.txt (0..", d.num_classes - 1, ")");
      }
      break;
    }
    case Format::kVoc: {
      d.segmentation = true;
      d.list = list_voc(root, split);
      d.list.classes = read_class_file(root);
      if (d.list.classes.empty())
        d.list.classes.assign(std::begin(kVocClasses), std::end(kVocClasses));
      d.num_classes = static_cast<int64_t>(d.list.classes.size());
      break;
    }
    case Format::kCityscapes: {
      d.segmentation = true;
      d.list = list_cityscapes(root, split);
      d.num_classes = kCityscapesClasses;
      for (int64_t c = 0; c < kCityscapesClasses; ++c) d.list.classes.push_back(std::to_string(c));
      break;
    }
  }
  return d;
}

}  // namespace data
}  // namespace tessera
