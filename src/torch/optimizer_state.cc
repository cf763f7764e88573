#include "torch/optimizer_state.h"

#include "common/error.h"

namespace tessera {
namespace detail {

void save_optimizer(const torch::optim::Optimizer& optimizer,
                    torch::serialize::OutputArchive& archive) {
  torch::serialize::OutputArchive state, options;
  optimizer.save(state);
  const auto& groups = optimizer.param_groups();
  options.write("size", torch::tensor(static_cast<int64_t>(groups.size())));
  for (size_t i = 0; i < groups.size(); ++i) {
    torch::serialize::OutputArchive group;
    groups[i].options().serialize(group);
    options.write(std::to_string(i), group);
  }
  archive.write("state", state);
  archive.write("group_options", options);
}

void load_optimizer(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive) {
  torch::serialize::InputArchive state, options;
  archive.read("state", state);
  archive.read("group_options", options);
  torch::Tensor size;
  options.read("size", size);
  auto& groups = optimizer.param_groups();
  TESSERA_CHECK(size.item<int64_t>() == static_cast<int64_t>(groups.size()),
                "the saved optimizer has ", size.item<int64_t>(), " parameter groups, this one ",
                groups.size());
  optimizer.load(state);
  for (size_t i = 0; i < groups.size(); ++i) {
    torch::serialize::InputArchive group;
    options.read(std::to_string(i), group);
    groups[i].options().serialize(group);
  }
}

}  // namespace detail
}  // namespace tessera
