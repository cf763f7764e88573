// Weights in PyTorch's own file format, both ways.
//
// write_state_dict writes a dict {name: tensor} with torch::pickle_save: Python's torch.load
// reads it, and model.load_state_dict(torch.load(f)) takes it. read_state_dict reads what
// Python's torch.save(model.state_dict(), f) writes (the zip format of PyTorch >= 1.6): its
// pickle holds an OrderedDict, which libtorch 1.13's own unpickler cannot rebuild, so
// torch_pickle.cc reads the pickle opcodes torch.save emits and the storages beside them.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace tessera {
namespace models {

using StateDict = std::vector<std::pair<std::string, torch::Tensor>>;

// Parameters and buffers by their dotted names, in torch.nn.Module.state_dict()'s order (module
// by module, each one's parameters then its buffers).
StateDict state_dict(const torch::nn::Module& module);
// Writes `dict` to `path` atomically (temporary file, flushed, renamed).
void write_state_dict(const StateDict& dict, const std::string& path);
// Reads a torch.save'd dict of tensors (a state_dict, or a dict holding one under "state_dict"
// or "model"). Throws InvalidArgument naming the file and what was wrong.
StateDict read_state_dict(const std::string& path);
// The same from the file's bytes (`path` only names it in messages): what read_state_dict does
// after reading the file, and the fuzz target's entry (tests/fuzz/fuzz_state_dict.cc).
StateDict parse_state_dict(const std::string& bytes, const std::string& path);

struct LoadReport {
  std::vector<std::string> loaded;
  std::vector<std::string> unused;   // in the file, not in the model (e.g. fc for a backbone)
  std::vector<std::string> missing;  // in the model, not in the file (kept as initialised)
};
// Copies every entry whose name matches (directly, or with the model's "backbone." prefix, so
// a torchvision ResNet's weights load into a DeepLab backbone). A shape or dtype that does not
// fit is an InvalidArgument naming `source`, the tensor and both shapes; nothing is copied then.
LoadReport load_state_dict(torch::nn::Module& module, const StateDict& dict,
                           const std::string& source);

}  // namespace models
}  // namespace tessera
