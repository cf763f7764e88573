// broadcast_parameters and broadcast_optimizer_state: every rank takes root's model and
// optimizer, so data-parallel replicas start identical (after random init or a resume).
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <sstream>

#include "common/error.h"
#include "tessera/torch.h"
#include "torch/optimizer_state.h"

namespace tessera {
// The length first (the engine needs equal shapes everywhere), then the data.
std::string broadcast_bytes(const std::string& bytes, int root, const std::string& name,
                            int process_set) {
  torch::Tensor len = torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kInt64);
  broadcast_(len, root, name + ".bytes", process_set);
  torch::Tensor buf = torch::empty({len.item<int64_t>()}, torch::kUInt8);
  if (rank() == root && !bytes.empty()) std::memcpy(buf.data_ptr(), bytes.data(), bytes.size());
  broadcast_(buf, root, name + ".data", process_set);
  return std::string(static_cast<const char*>(buf.data_ptr()), static_cast<size_t>(buf.numel()));
}

std::vector<std::string> allgather_bytes(const std::string& bytes, const std::string& name,
                                         int process_set) {
  torch::Tensor mine = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  if (!bytes.empty()) std::memcpy(mine.data_ptr(), bytes.data(), bytes.size());
  const torch::Tensor sizes =
      allgather(torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kInt64), name + ".size",
                process_set);
  const torch::Tensor data = allgather(mine, name + ".data", process_set);
  std::vector<std::string> out;
  const char* at = static_cast<const char*>(data.data_ptr());
  for (int64_t k = 0; k < sizes.numel(); ++k) {
    const size_t n = static_cast<size_t>(sizes[k].item<int64_t>());
    out.emplace_back(at, n);
    at += n;
  }
  return out;
}

void broadcast_parameters(torch::nn::Module& module, int root) {
  TESSERA_CHECK(root >= 0 && root < size(), "broadcast_parameters: root ", root,
                " is not a rank; accepted: 0 to ", size() - 1);
  // A different model on some rank would otherwise wait on names the others never send.
  std::string description = describe_parameters(module.named_parameters(), false);
  description += describe_parameters(module.named_buffers(), false);
  verify_across_ranks("the model's parameters and buffers", description);
  torch::NoGradGuard no_grad;
  std::vector<TensorHandle> handles;
  std::vector<torch::Tensor> targets;
  auto add = [&](const std::string& name, torch::Tensor& t) {
    if (!t.defined() || t.numel() == 0) return;
    handles.push_back(broadcast_async(t, root, "broadcast_parameters." + name));
    targets.push_back(t);
  };
  for (auto& kv : module.named_parameters()) add(kv.key(), kv.value());
  for (auto& kv : module.named_buffers()) add(kv.key(), kv.value());
  for (size_t i = 0; i < handles.size(); ++i) targets[i].copy_(synchronize(handles[i]));
}

void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root) {
  TESSERA_CHECK(root >= 0 && root < size(), "broadcast_optimizer_state: root ", root,
                " is not a rank; accepted: 0 to ", size() - 1);
  std::string bytes;
  if (rank() == root) {
    torch::serialize::OutputArchive archive;
    detail::save_optimizer(optimizer, archive);
    std::ostringstream os;
    archive.save_to(os);
    bytes = os.str();
  }
  bytes = broadcast_bytes(bytes, root, "broadcast_optimizer_state");
  if (rank() != root) {
    torch::serialize::InputArchive archive;
    std::istringstream is(bytes);
    archive.load_from(is);
    detail::load_optimizer(optimizer, archive);
  }
}

}  // namespace tessera
