#include "data/formats.h"

#include <algorithm>
#include <filesystem>

#include "common/error.h"
#include "data/lists.h"

namespace tessera {
namespace data {
namespace fs = std::filesystem;

namespace {

bool is_image(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

void require_dir(const fs::path& p, const char* what) {
  TESSERA_CHECK(fs::is_directory(p), what, " '", p.string(), "' is not a folder");
}

void require_file(const fs::path& p, const char* what) {
  TESSERA_CHECK(fs::is_regular_file(p), what, " '", p.string(), "' is missing");
}

}  // namespace

SampleList list_folder(const std::string& root) {
  require_dir(root, "data folder");
  SampleList out;
  std::vector<fs::path> classes;
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.is_directory()) classes.push_back(e.path());
  }
  std::sort(classes.begin(), classes.end());
  TESSERA_CHECK(!classes.empty(), "data folder '", root,
                "' has no class folders; expected root/<class>/*.jpg|png");
  for (size_t c = 0; c < classes.size(); ++c) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(classes[c])) {
      if (e.is_regular_file() && is_image(e.path())) files.push_back(e.path());
    }
    TESSERA_CHECK(!files.empty(), "class folder '", classes[c].string(),
                  "' holds no .jpg, .jpeg or .png file");
    std::sort(files.begin(), files.end());
    out.classes.push_back(classes[c].filename().string());
    for (const fs::path& f : files)
      out.samples.push_back({f.string(), "", static_cast<int64_t>(c)});
  }
  return out;
}

SampleList list_csv(const std::string& manifest) {
  require_file(manifest, "manifest");
  const fs::path base = fs::path(manifest).parent_path();
  SampleList out;
  int64_t max_label = -1;
  for (const ManifestEntry& e : parse_manifest(read_text_file(manifest, "manifest"), manifest)) {
    fs::path p(e.path);
    if (p.is_relative()) p = base / p;
    require_file(p, (manifest + ":" + std::to_string(e.line) + ": image").c_str());
    out.samples.push_back({p.string(), "", e.label});
    max_label = std::max(max_label, e.label);
  }
  for (int64_t c = 0; c <= max_label; ++c) out.classes.push_back(std::to_string(c));
  return out;
}

SampleList list_voc(const std::string& root, const std::string& split) {
  require_dir(root, "VOC folder");
  const fs::path list = fs::path(root) / "ImageSets" / "Segmentation" / (split + ".txt");
  require_file(list, "VOC split file");
  SampleList out;
  for (const std::string& id :
       parse_split(read_text_file(list.string(), "VOC split file"), list.string())) {
    const fs::path image = fs::path(root) / "JPEGImages" / (id + ".jpg");
    const fs::path mask = fs::path(root) / "SegmentationClass" / (id + ".png");
    require_file(image, "VOC image");
    require_file(mask, "VOC mask");
    out.samples.push_back({image.string(), mask.string(), -1});
  }
  return out;
}

SampleList list_cityscapes(const std::string& root, const std::string& split) {
  const fs::path images = fs::path(root) / "leftImg8bit" / split;
  require_dir(images, "Cityscapes image folder");
  const std::string suffix = "_leftImg8bit.png";
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(images)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      files.push_back(e.path());
    }
  }
  TESSERA_CHECK(!files.empty(), "Cityscapes folder '", images.string(), "' holds no *", suffix,
                " file");
  std::sort(files.begin(), files.end());
  SampleList out;
  for (const fs::path& f : files) {
    const std::string name = f.filename().string();
    const std::string stem = name.substr(0, name.size() - suffix.size());
    const fs::path mask = fs::path(root) / "gtFine" / split / f.parent_path().filename() /
                          (stem + "_gtFine_labelIds.png");
    require_file(mask, "Cityscapes label image");
    out.samples.push_back({f.string(), mask.string(), -1});
  }
  return out;
}

uint8_t cityscapes_train_id(int label_id) {
  // labelId -> trainId for ids 0..33 (cityscapesScripts labels.py); 255: not evaluated.
  static const uint8_t kTable[34] = {255, 255, 255, 255, 255, 255, 255, 0,  1,  255, 255, 2,
                                     3,   4,   255, 255, 255, 5,   255, 6,  7,  8,   9,   10,
                                     11,  12,  13,  14,  15,  255, 255, 16, 17, 18};
  if (label_id < 0 || label_id > 33) return 255;
  return kTable[label_id];
}

}  // namespace data
}  // namespace tessera
