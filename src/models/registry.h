// The built-in models by name: resnet18, resnet50 (classification), deeplabv3plus_resnet18,
// deeplabv3plus_resnet50 (segmentation). One interface for the trainer and the benchmarks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/deeplab.h"
#include "models/resnet.h"

namespace tessera {
namespace models {

enum class Task { kClassification, kSegmentation };

struct ModelSpec {
  std::string name = "resnet50";
  int64_t num_classes = 1000;
  int output_stride = 16;  // segmentation models
  NormSpec norm;
};

// A model behind one forward: logits [N, K] (classification) or [N, K, H, W] (segmentation).
class Model {
 public:
  Model(std::shared_ptr<torch::nn::Module> module,
        std::function<torch::Tensor(const torch::Tensor&)> forward, Task task)
      : module_(std::move(module)), forward_(std::move(forward)), task_(task) {}
  torch::Tensor forward(const torch::Tensor& x) const { return forward_(x); }
  torch::nn::Module& module() const { return *module_; }
  Task task() const { return task_; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  std::function<torch::Tensor(const torch::Tensor&)> forward_;
  Task task_;
};

// Throws InvalidArgument naming the model and the accepted names.
Model make_model(const ModelSpec& spec);
const std::vector<std::string>& model_names();
Task task_of(const std::string& name);

}  // namespace models
}  // namespace tessera
