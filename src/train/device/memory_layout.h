// --memory-format and --cudnn-benchmark: how a run's 4-d tensors lie in memory, and whether
// cuDNN may time its convolution algorithms. Channels-last (NHWC) is the layout of the GPUs'
// tensor-core convolutions: in the default NCHW layout cuDNN transposes around each one.
#pragma once

#include <torch/torch.h>

#include <string>

namespace tessera {
namespace train {

enum class MemoryFormat { kContiguous, kChannelsLast };

// contiguous (NCHW, torch's default) or channels-last (NHWC; channels_last, torch's spelling,
// too); InvalidArgument listing them.
MemoryFormat parse_memory_format(const std::string& name);

// Every 4-d parameter and buffer of `net` in `format`, in place: each keeps its identity, so an
// optimizer made over them still holds them. (Do this before a DistributedOptimizer is made, as
// any other change to the parameters.)
void to_memory_format(torch::nn::Module& net, MemoryFormat format);

// A 4-d batch in `format` (a copy only when it is not already); other tensors as they are.
torch::Tensor in_memory_format(const torch::Tensor& x, MemoryFormat format);

// cuDNN times the algorithms of each new convolution shape once and keeps the fastest (torch's
// cudnn.benchmark). Off by default, as in PyTorch: the fastest may not be deterministic.
void set_cudnn_benchmark(bool on);

}  // namespace train
}  // namespace tessera
