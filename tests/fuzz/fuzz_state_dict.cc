// libFuzzer target: reading weights in PyTorch's file format (models/state_dict.h: the zip
// archive and the pickle opcodes torch.save writes). Any bytes must give named tensors or an
// InvalidArgument naming the file; nothing else may escape, and every tensor must be readable
// to its last byte. Seeds: Python's torch.save of an OrderedDict and tessera's own
// write_state_dict (tests/fuzz/corpus/state_dict, written by tests/fuzz/make_state_dict_seeds.py).
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>

#include "common/error.h"
#include "models/state_dict.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  torch::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const tessera::models::StateDict dict = tessera::models::parse_state_dict(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz.pt");
    for (const auto& [name, tensor] : dict) {
      // Touch every element: a storage shorter than its view would read out of bounds here.
      (void)name;
      if (tensor.numel() > 0) (void)tensor.to(torch::kDouble).sum().item<double>();
    }
  } catch (const tessera::InvalidArgument&) {
  }
  return 0;
}
