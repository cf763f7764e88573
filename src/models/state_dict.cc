#include "models/state_dict.h"

#include <map>

#include "common/atomic_file.h"
#include "common/error.h"

namespace tessera {
namespace models {

StateDict state_dict(const torch::nn::Module& module) {
  // PyTorch's order: module by module (pre-order), each one's parameters, then its buffers.
  StateDict out;
  auto add_own = [&](const std::string& prefix, const torch::nn::Module& m) {
    for (const auto& kv : m.named_parameters(/*recurse=*/false)) {
      out.emplace_back(prefix + kv.key(), kv.value());
    }
    for (const auto& kv : m.named_buffers(/*recurse=*/false)) {
      out.emplace_back(prefix + kv.key(), kv.value());
    }
  };
  add_own("", module);
  for (const auto& kv : module.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    add_own(kv.key() + ".", *kv.value());
  }
  return out;
}

void write_state_dict(const StateDict& dict, const std::string& path) {
  c10::Dict<std::string, at::Tensor> d;
  for (const auto& kv : dict) d.insert(kv.first, kv.second.detach().contiguous());
  const std::vector<char> bytes = torch::pickle_save(d);
  write_file_atomically(path, bytes.data(), bytes.size());
}

LoadReport load_state_dict(torch::nn::Module& module, const StateDict& dict,
                           const std::string& source) {
  std::map<std::string, torch::Tensor> file(dict.begin(), dict.end());
  LoadReport report;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (target, value)
  std::map<std::string, bool> used;
  for (auto& kv : state_dict(module)) {
    const std::string& name = kv.first;
    auto it = file.find(name);
    if (it == file.end() && name.rfind("backbone.", 0) == 0) it = file.find(name.substr(9));
    if (it == file.end()) {
      report.missing.push_back(name);
      continue;
    }
    const torch::Tensor& value = it->second;
    TESSERA_CHECK(value.sizes() == kv.second.sizes(), source, ": '", it->first, "' has shape ",
                  value.sizes(), " but the model's '", name, "' has shape ", kv.second.sizes(),
                  "; weights load only into the same architecture (and number of classes)");
    TESSERA_CHECK(value.is_floating_point() == kv.second.is_floating_point(), source, ": '",
                  it->first, "' is ", value.scalar_type(), " but the model's '", name, "' is ",
                  kv.second.scalar_type());
    copies.emplace_back(kv.second, value);
    used[it->first] = true;
    report.loaded.push_back(name);
  }
  for (const auto& kv : dict) {
    if (!used.count(kv.first)) report.unused.push_back(kv.first);
  }
  torch::NoGradGuard no_grad;
  for (auto& c : copies) c.first.copy_(c.second);
  return report;
}

}  // namespace models
}  // namespace tessera
