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

// The checkpoint as bytes: a 32-byte envelope (kCheckpointMagic, the archive's length and its
// FNV-1a 64 digest, little-endian) around libtorch's archive. The digest is checked before
// libtorch sees a byte: libtorch's reader crashes (SIGSEGV in its TorchScript type parser) on
// some damaged archives (found by tests/fuzz/fuzz_checkpoint.cc), so a damaged file must be
// refused by tessera. It detects damage, not tampering: a checkpoint is trusted input, as
// torch.load's pickles are.
constexpr char kCheckpointMagic[16] = "TESSERA-CKPT-v2";  // 15 characters and a NUL
// The archive inside a checkpoint's bytes, after checking the envelope; a truncated or damaged
// file, or one written before the envelope existed, is an InvalidArgument naming `source`.
std::string checkpoint_archive(const std::string& bytes, const std::string& source);
std::string encode_checkpoint(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                              const CheckpointMeta& meta);
void write_checkpoint(const std::string& path, torch::nn::Module& module,
                      torch::optim::Optimizer& optimizer, const CheckpointMeta& meta);
// Restores module, optimizer and the RNG state from `bytes` (read from `source`, named in
// errors) and returns the meta. A truncated or foreign file, or one of another model or number
// of classes than `expect` names, is an InvalidArgument, raised before anything is changed.
// Tensors are read onto the CPU whatever device wrote them: restore into a module on the CPU,
// then move it (and the optimizer's state) to its device, as the trainer does.
CheckpointMeta restore_checkpoint(const std::string& bytes, const std::string& source,
                                  const CheckpointMeta& expect, torch::nn::Module& module,
                                  torch::optim::Optimizer& optimizer);

}  // namespace train
}  // namespace tessera
