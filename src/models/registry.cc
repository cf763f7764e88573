#include "models/registry.h"

#include "common/error.h"

namespace tessera {
namespace models {

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = {"resnet18", "resnet50", "deeplabv3plus_resnet18",
                                                 "deeplabv3plus_resnet50"};
  return names;
}

namespace {

std::string accepted() {
  std::string s;
  for (const std::string& n : model_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

Task task_of(const std::string& name) {
  if (name == "resnet18" || name == "resnet50") return Task::kClassification;
  if (name == "deeplabv3plus_resnet18" || name == "deeplabv3plus_resnet50") {
    return Task::kSegmentation;
  }
  throw InvalidArgument("unknown model '" + name + "'; accepted: " + accepted());
}

Model make_model(const ModelSpec& spec) {
  const Task task = task_of(spec.name);
  TESSERA_CHECK(spec.num_classes > 0, "model '", spec.name, "' needs num_classes > 0, got ",
                spec.num_classes);
  const int depth = spec.name.find("resnet18") != std::string::npos ? 18 : 50;
  if (task == Task::kClassification) {
    ResNetOptions o;
    o.depth = depth;
    o.num_classes = spec.num_classes;
    o.norm = spec.norm;
    ResNet net(o);
    return Model(
        net.ptr(), [net](const torch::Tensor& x) mutable { return net->forward(x); }, task);
  }
  DeepLabOptions o;
  o.depth = depth;
  o.num_classes = spec.num_classes;
  o.output_stride = spec.output_stride;
  o.norm = spec.norm;
  DeepLabV3Plus net(o);
  return Model(
      net.ptr(), [net](const torch::Tensor& x) mutable { return net->forward(x); }, task);
}

}  // namespace models
}  // namespace tessera
