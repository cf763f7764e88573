// libFuzzer target: loading a checkpoint (train/checkpoint.h) into a small model with an
// optimizer that has state (SGD with momentum, so the optimizer archive is not empty). Any bytes
// must load or fail with InvalidArgument naming the file; nothing else may escape.
// This target found that libtorch 1.13's archive reader crashes (SIGSEGV in its TorchScript type
// parser) on some damaged archives, as upstream fuzzing did (pytorch/pytorch#94815, #102156,
// fixed after 1.13): so checkpoints carry a checksummed envelope, and a mutated input is refused
// before libtorch reads it. What this target exercises now is that envelope. An input whose
// envelope passes is loaded only if its archive is this model's own: libFuzzer can forge the
// 64-bit digest by reading it off the comparison (its comparison tracing did, within a 20 s run),
// which damage cannot (odds 2^-64), and such forged inputs would only reach libtorch's own
// known crash again.
// The seed in tests/fuzz/corpus/checkpoint is this model's own checkpoint after one step:
// TESSERA_FUZZ_WRITE_SEED=PATH fuzz_checkpoint writes it and exits.
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>

#include "common/error.h"
#include "train/checkpoint.h"

namespace {

struct Target {
  // Seeded before the model is built, so every process builds the same weights and writes the
  // same checkpoint: the seed's archive is this process's own_archive.
  bool seeded = (torch::manual_seed(1), true);
  torch::nn::Sequential model{torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 3, 3)),
                              torch::nn::BatchNorm2d(3), torch::nn::Flatten(),
                              torch::nn::Linear(3 * 2 * 2, 2)};
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)};
  tessera::train::CheckpointMeta meta{};
  std::string own_archive;  // this model's checkpoint, without its envelope (the seed's)

  Target() {
    meta.model = "fuzz_net";
    meta.num_classes = 2;
    meta.image_size = 4;
    meta.step = 1;
    optimizer.zero_grad();
    model->forward(torch::randn({2, 2, 4, 4})).sum().backward();
    optimizer.step();
    own_archive = tessera::train::checkpoint_archive(encode(), "the fuzz target's own checkpoint");
  }
  std::string encode() { return tessera::train::encode_checkpoint(*model, optimizer, meta); }
};

Target& target() {
  static Target* t = new Target();  // kept for the process: libFuzzer calls in a loop
  return *t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  torch::set_num_threads(1);
  if (const char* path = std::getenv("TESSERA_FUZZ_WRITE_SEED")) {
    Target& t = target();
    std::ofstream(path, std::ios::binary) << t.encode();
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Target& t = target();
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    if (tessera::train::checkpoint_archive(bytes, "fuzz.pt") != t.own_archive) {
      return 0;  // a forged digest (see the top of this file)
    }
  } catch (const tessera::InvalidArgument&) {
    return 0;  // refused by the envelope: what any damage must get
  }
  try {
    (void)tessera::train::restore_checkpoint(bytes, "fuzz.pt", t.meta, *t.model, t.optimizer);
  } catch (const tessera::InvalidArgument&) {
  }
  return 0;
}
