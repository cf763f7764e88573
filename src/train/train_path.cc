#include "train/train_path.h"

#include <cstdio>
#include <optional>

#include "common/error.h"
#include "spatial/process_grid.h"
#include "spatial/spatial_resnet.h"
#include "tessera/torch.h"
#include "train/input/input.h"
#include "train/input/slide_input.h"
#include "train/metrics.h"

namespace tessera {
namespace train {
namespace {

// The user's input options with what this run decides: the seed, the targets the model needs,
// one process or many, pinned batches for a GPU.
InputOptions input_options(const TrainOptions& o, models::Task task, bool dist, bool pinned) {
  InputOptions io = o.input;
  io.seed = o.seed;
  io.segmentation = task == models::Task::kSegmentation;
  io.quiet = o.quiet;
  io.dist = dist;
  io.pinned = pinned;
  return io;
}

// Whole images on every rank, the whole model; with --sync-bn, BatchNorm's statistics over every
// rank's batch.
class DataParallelPath : public TrainPath {
 public:
  DataParallelPath(const TrainOptions& o, bool dist, bool pinned)
      : o_(o),
        dist_(dist),
        task_(models::task_of(o.model)),
        input_(input_options(o, task_, dist, pinned)) {
    TESSERA_CHECK(input_.segmentation() == (task_ == models::Task::kSegmentation), "--model ",
                  o.model, " is a ",
                  task_ == models::Task::kSegmentation ? "segmentation" : "classification",
                  " model but --data '", o.input.data, "' (", o.input.format, ") holds ",
                  input_.segmentation() ? "segmentation masks" : "class labels");
  }

  StepInput& input() override { return input_; }
  int64_t global_batch() const override { return (dist_ ? size() : 1) * o_.input.batch; }

  models::Model make_model(models::ModelSpec spec) override {
    spec.norm.sync = o_.sync_bn && dist_;
    model_.emplace(models::make_model(spec));
    return *model_;
  }

  torch::Tensor forward(const torch::Tensor& x) override { return model_->forward(x); }

  Evaluation evaluate(int64_t show) override {
    torch::NoGradGuard no_grad;
    const models::Model& model = *model_;
    const int64_t k = input_.num_classes();
    const bool classify = task_ == models::Task::kClassification;
    model.module().eval();
    torch::Tensor confusion = torch::zeros({k, k}, torch::kLong);
    // The parameters' dtype and device; the confusion matrix stays on the CPU.
    const torch::TensorOptions where = model.module().parameters().front().options();
    Evaluation e;
    std::vector<torch::Tensor> images, truth, predicted;
    int64_t kept = 0;
    input_.for_each_eval_batch([&](const data::Batch& b) {
      torch::Tensor pred = model.forward(b.images.to(where)).argmax(1).cpu();
      accumulate_confusion(confusion, pred, classify ? b.labels : b.masks);
      const int64_t more = std::min(show - kept, b.images.size(0));
      if (classify || more <= 0) return;
      images.push_back(b.images.narrow(0, 0, more));
      truth.push_back(b.masks.narrow(0, 0, more));
      predicted.push_back(pred.narrow(0, 0, more));
      kept += more;
    });
    if (dist_) allreduce_(confusion, "eval.confusion", ReduceOp::kSum);
    model.module().train();
    e.accuracy = accuracy(confusion);
    e.metric = classify ? e.accuracy : mean_iou(confusion);
    if (kept > 0) {
      e.shown_images = torch::cat(images);
      e.shown_truth = torch::cat(truth);
      e.shown_predicted = torch::cat(predicted);
    }
    return e;
  }

  std::string metric_name() const override {
    return task_ == models::Task::kClassification ? "accuracy" : "miou";
  }

  void report_data(TrainResult& result, bool talk) const override {
    result.file_bytes_after_first_epoch = input_.file_bytes_after_first_epoch();
    if (!talk || input_.memory_report().empty()) return;
    std::printf(
        "data: rank 0 waited %.2f s for batches in all; %llu bytes read from files after "
        "the first epoch\n",
        result.data_wait_seconds,
        static_cast<unsigned long long>(result.file_bytes_after_first_epoch));
  }

 private:
  const TrainOptions& o_;
  const bool dist_;
  const models::Task task_;
  TrainInput input_;
  std::optional<models::Model> model_;
};

SlideInputOptions slide_options(const TrainOptions& o, const spatial::ProcessGrid& grid, bool dist,
                                bool pinned) {
  SlideInputOptions so;
  so.input = input_options(o, models::Task::kClassification, dist, pinned);
  so.grid = grid.shape();
  so.at = grid.coord();
  return so;
}

// Each rank holds its tile of every slide of its data group's batch; the ResNet's layers
// exchange halos over the grid, and BatchNorm reduces its own statistics (over the grid's world
// with --sync-bn).
class SpatialPath : public TrainPath {
 public:
  SpatialPath(const TrainOptions& o, bool dist, bool pinned)
      : o_(o), grid_(o.spatial), input_(slide_options(o, grid_, dist, pinned)) {}

  StepInput& input() override { return input_; }
  int64_t global_batch() const override { return grid_.shape().data * o_.input.batch; }

  models::Model make_model(models::ModelSpec spec) override {
    spec.norm.sync = false;
    models::Model model = models::make_model(spec);
    resnet_ = model.module().as<models::ResNetImpl>();
    spatial::check_resnet_tiling(*resnet_, o_.input.image_size, grid_.shape().h, grid_.shape().w);
    return model;
  }

  torch::Tensor forward(const torch::Tensor& x) override {
    return spatial::spatial_resnet_forward(*resnet_, x, grid_.space(),
                                           o_.sync_bn ? &grid_.world() : nullptr);
  }

  Evaluation evaluate(int64_t show) override;

  std::string metric_name() const override {
    return input_.num_classes() == 2 ? "auc" : "accuracy";
  }

  void report_data(TrainResult& result, bool talk) const override {
    result.slide_bytes_read = input_.bytes_read();
    result.slide_file_bytes = input_.slide_bytes();
    if (!talk) return;
    std::printf(
        "data: rank 0 waited %.2f s for tiles in all; read %.1f MiB from files for tiles of "
        "slides of %.1f MiB (%.1f%%)\n",
        result.data_wait_seconds, static_cast<double>(result.slide_bytes_read) / 1048576.0,
        static_cast<double>(result.slide_file_bytes) / 1048576.0,
        100.0 * static_cast<double>(result.slide_bytes_read) /
            std::max<double>(1.0, static_cast<double>(result.slide_file_bytes)));
  }

 private:
  const TrainOptions& o_;
  spatial::ProcessGrid grid_;
  SlideInput input_;
  models::ResNetImpl* resnet_ = nullptr;
};

// Each spatial group's first rank writes its val samples' scores (the probability of class 1),
// correctness and labels into one table that a sum over every rank completes. The metric is the
// ROC AUC for two classes (when both occur), else the accuracy.
Evaluation SpatialPath::evaluate(int64_t /*show: no masks*/) {
  torch::NoGradGuard no_grad;
  resnet_->eval();
  const int64_t n = input_.val_samples(), num_classes = input_.num_classes();
  // The parameters' dtype and device; the table stays on the CPU.
  const torch::TensorOptions where = resnet_->parameters().front().options();
  torch::Tensor table = torch::zeros({3, n}, torch::kDouble);  // score, correct, label
  input_.for_each_eval_batch([&](const data::Batch& b, const std::vector<int64_t>& indices) {
    const torch::Tensor logits =
        spatial::spatial_resnet_forward(*resnet_, b.images.to(where), grid_.space())
            .to(torch::kCPU, torch::kDouble);
    if (grid_.spatial().rank() != 0) return;  // the group's other ranks hold the same logits
    const torch::Tensor prob = torch::softmax(logits, 1);
    const torch::Tensor correct = logits.argmax(1).eq(b.labels).to(torch::kDouble);
    for (size_t k = 0; k < indices.size(); ++k) {
      const int64_t i = static_cast<int64_t>(k);
      table[0][indices[k]] = num_classes == 2 ? prob[i][1].item<double>() : 0.0;
      table[1][indices[k]] = correct[i].item<double>();
      table[2][indices[k]] = static_cast<double>(b.labels[i].item<int64_t>());
    }
  });
  allreduce_(table, "eval.slides", ReduceOp::kSum);
  resnet_->train();
  Evaluation e;
  e.accuracy = n > 0 ? table[1].sum().item<double>() / static_cast<double>(n) : 0.0;
  e.metric = e.accuracy;
  const torch::Tensor labels = table[2].to(torch::kLong);
  if (num_classes == 2 && labels.eq(0).any().item<bool>() && labels.eq(1).any().item<bool>()) {
    const torch::Tensor scores = table[0].contiguous();
    const torch::Tensor l = labels.contiguous();
    e.metric =
        roc_auc(std::vector<double>(scores.data_ptr<double>(), scores.data_ptr<double>() + n),
                std::vector<int64_t>(l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + n));
  }
  return e;
}

}  // namespace

std::unique_ptr<TrainPath> make_train_path(const TrainOptions& o, bool dist, bool pinned) {
  if (o.spatial.empty()) return std::make_unique<DataParallelPath>(o, dist, pinned);
  return std::make_unique<SpatialPath>(o, dist, pinned);
}

}  // namespace train
}  // namespace tessera
