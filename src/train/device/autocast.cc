#include "train/device/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace tessera {
namespace train {
namespace {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
at::DeviceType type_of(bool cuda) { return cuda ? at::kCUDA : at::kCPU; }
bool enabled(bool cuda) { return at::autocast::is_autocast_enabled(type_of(cuda)); }
void set_enabled(bool cuda, bool on) { at::autocast::set_autocast_enabled(type_of(cuda), on); }
torch::ScalarType dtype(bool cuda) { return at::autocast::get_autocast_dtype(type_of(cuda)); }
void set_dtype(bool cuda, torch::ScalarType t) {
  at::autocast::set_autocast_dtype(type_of(cuda), t);
}
#else
bool enabled(bool cuda) {
  return cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
void set_enabled(bool cuda, bool on) {
  if (cuda) {
    at::autocast::set_enabled(on);
  } else {
    at::autocast::set_cpu_enabled(on);
  }
}
torch::ScalarType dtype(bool cuda) {
  return cuda ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void set_dtype(bool cuda, torch::ScalarType t) {
  if (cuda) {
    at::autocast::set_autocast_gpu_dtype(t);
  } else {
    at::autocast::set_autocast_cpu_dtype(t);
  }
}
#endif

}  // namespace

AutocastScope::AutocastScope(const torch::Device& device, torch::ScalarType t)
    : on_(t == torch::kBFloat16 || t == torch::kHalf), cuda_(device.is_cuda()) {
  if (!on_) return;
  was_enabled_ = enabled(cuda_);
  was_dtype_ = dtype(cuda_);
  set_dtype(cuda_, t);
  set_enabled(cuda_, true);
}

AutocastScope::~AutocastScope() {
  if (!on_) return;
  set_enabled(cuda_, was_enabled_);
  set_dtype(cuda_, was_dtype_);
  // The casts of the parameters made inside the scope are cached for it alone: the next step's
  // weights differ.
  if (!was_enabled_) at::autocast::clear_cache();
}

}  // namespace train
}  // namespace tessera
