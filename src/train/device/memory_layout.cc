#include "train/device/memory_layout.h"

#include "common/error.h"

namespace tessera {
namespace train {
namespace {

at::MemoryFormat torch_format(MemoryFormat f) {
  return f == MemoryFormat::kChannelsLast ? at::MemoryFormat::ChannelsLast
                                          : at::MemoryFormat::Contiguous;
}

}  // namespace

MemoryFormat parse_memory_format(const std::string& name) {
  if (name == "contiguous") return MemoryFormat::kContiguous;
  if (name == "channels-last" || name == "channels_last") return MemoryFormat::kChannelsLast;
  throw InvalidArgument("--memory-format '" + name +
                        "' is not known; accepted: contiguous (NCHW), channels-last (NHWC)");
}

void to_memory_format(torch::nn::Module& net, MemoryFormat format) {
  torch::NoGradGuard no_grad;
  const at::MemoryFormat f = torch_format(format);
  // set_data keeps the tensor (and its autograd identity); only its storage and strides change.
  for (torch::Tensor& p : net.parameters()) {
    if (p.dim() == 4) p.set_data(p.data().contiguous(f));
  }
  for (torch::Tensor& b : net.buffers()) {
    if (b.dim() == 4) b.set_data(b.data().contiguous(f));
  }
}

torch::Tensor in_memory_format(const torch::Tensor& x, MemoryFormat format) {
  return x.dim() == 4 ? x.contiguous(torch_format(format)) : x;
}

void set_cudnn_benchmark(bool on) { at::globalContext().setBenchmarkCuDNN(on); }

}  // namespace train
}  // namespace tessera
