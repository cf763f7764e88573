#include "train/device/device_feed.h"

#include <utility>

namespace tessera {
namespace train {
namespace {

torch::Tensor pinned(const torch::Tensor& t) { return t.defined() ? t.pin_memory() : t; }

// Each tensor copied before start() returns: the host, or a libtorch without CUDA streams.
class SyncCopier : public DeviceCopier {
 public:
  explicit SyncCopier(const torch::Device& device) : device_(device) {}
  data::Batch start(const data::Batch& host) override {
    data::Batch out;
    out.images = to_device(host.images);
    out.masks = to_device(host.masks);
    out.labels = to_device(host.labels);
    return out;
  }
  void ready(data::Batch&) override {}

 private:
  torch::Tensor to_device(const torch::Tensor& t) const { return t.defined() ? t.to(device_) : t; }
  torch::Device device_;
};

}  // namespace

#ifdef TESSERA_TORCH_CUDA
std::unique_ptr<DeviceCopier> make_cuda_copier(const torch::Device& device);  // device_copy_cuda.cc
#endif

data::Batch pinned_batch(const data::Batch& b) {
  data::Batch out;
  out.images = pinned(b.images);
  out.masks = pinned(b.masks);
  out.labels = pinned(b.labels);
  return out;
}

std::unique_ptr<DeviceCopier> make_device_copier(const torch::Device& device) {
#ifdef TESSERA_TORCH_CUDA
  if (device.is_cuda()) return make_cuda_copier(device);
#endif
  return std::make_unique<SyncCopier>(device);
}

DeviceFeed::DeviceFeed(StepInput& input, std::unique_ptr<DeviceCopier> copier)
    : input_(input), copier_(std::move(copier)) {}

data::Batch DeviceFeed::batch(int64_t step, int64_t end) {
  // A step other than the queued one (the first, or after a jump) is copied now.
  data::Batch b =
      step == queued_step_ ? std::move(queued_) : copier_->start(input_.batch(step, end));
  queued_step_ = -1;
  queued_ = data::Batch();
  copier_->ready(b);  // before the next start: the copier's event is the last start's
  if (step + 1 < end) {
    queued_ = copier_->start(input_.batch(step + 1, end));
    queued_step_ = step + 1;
  }
  return b;
}

}  // namespace train
}  // namespace tessera
