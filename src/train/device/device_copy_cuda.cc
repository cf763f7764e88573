// DeviceFeed's copier where libtorch has CUDA: the copies on a stream of their own, so they run
// while the compute stream works on the step before (built with TORCH_CUDA_LIBRARIES only).
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "train/device/device_feed.h"

namespace tessera {
namespace train {
namespace {

class CudaCopier : public DeviceCopier {
 public:
  explicit CudaCopier(const torch::Device& device)
      : device_(device), side_(c10::cuda::getStreamFromPool(false, device.index())) {}

  data::Batch start(const data::Batch& host) override {
    const c10::cuda::CUDAStreamGuard on_side(side_);
    data::Batch out;
    out.images = to_device(host.images);
    out.masks = to_device(host.masks);
    out.labels = to_device(host.labels);
    copied_.record(side_);
    return out;
  }

  void ready(data::Batch& b) override {
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_.index());
    copied_.block(compute);
    // Allocated on the side stream, used on the compute one: the caching allocator must not
    // hand the memory out again before the compute stream is done with it.
    for (torch::Tensor* t : {&b.images, &b.masks, &b.labels}) {
      if (t->defined()) t->record_stream(compute.unwrap());
    }
  }

 private:
  // Asynchronous from pinned memory (the workers pin each batch); a pageable source is copied
  // synchronously by CUDA, still correct.
  torch::Tensor to_device(const torch::Tensor& t) const {
    return t.defined() ? t.to(device_, /*non_blocking=*/true) : t;
  }

  torch::Device device_;
  c10::cuda::CUDAStream side_;
  at::cuda::CUDAEvent copied_;
};

}  // namespace

std::unique_ptr<DeviceCopier> make_cuda_copier(const torch::Device& device) {
  return std::make_unique<CudaCopier>(device);
}

}  // namespace train
}  // namespace tessera
