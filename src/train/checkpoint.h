// Training checkpoints: model, optimizer state, step, epoch, the run's identity and every RNG
// state that the run draws from (libtorch's CPU generator; the data order is a pure function of
// (seed, epoch) and needs none), so that a resumed run continues bit for bit.
//
// Written by rank 0 to a temporary file, flushed and renamed (common/atomic_file.h): a crash
// or a full disk leaves the previous checkpoint intact.
#pragma once

#include <torch/torch.h>

#include <string>

namespace tessera {
namespace train {

struct CheckpointMeta {
  std::string model;
  int64_t num_classes = 0;
  int64_t image_size = 0;
  int64_t step = 0;   // steps completed
  int64_t epoch = 0;  // epoch of the next step
};

// The checkpoint as bytes (libtorch's archive format).
std::string encode_checkpoint(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                              const CheckpointMeta& meta);
void write_checkpoint(const std::string& path, torch::nn::Module& module,
                      torch::optim::Optimizer& optimizer, const CheckpointMeta& meta);
// Restores module, optimizer and the RNG state from `bytes` (read from `source`, named in
// errors) and returns the meta. A truncated or foreign file, or one of another model or number
// of classes than `expect` names, is an InvalidArgument, raised before anything is changed.
CheckpointMeta restore_checkpoint(const std::string& bytes, const std::string& source,
                                  const CheckpointMeta& expect, torch::nn::Module& module,
                                  torch::optim::Optimizer& optimizer);

}  // namespace train
}  // namespace tessera
