#include "torch/optimizer_state.h"

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "common/error.h"

namespace tessera {
namespace detail {

namespace {

// libtorch keys an optimizer's per-parameter state by the parameter's TensorImpl address, and
// Optimizer::save writes those keys in hash-map order: two identical runs write different bytes.
// Written here instead by (group, index) in parameter order, a checkpoint is a pure function of
// the training state, so identical runs give identical files (compared with cmp).
//
// The key is the address printed as a string in libtorch 1.13 and the address itself in 2.x.
using StateKey = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;

template <class Key>
Key key_as(c10::TensorImpl* impl) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream os;  // as libtorch 1.13's c10::guts::to_string prints a pointer
    os << static_cast<const void*>(impl);
    return os.str();
  } else {
    return impl;
  }
}

StateKey key_of(const torch::Tensor& p) { return key_as<StateKey>(p.unsafeGetTensorImpl()); }

template <class Opt, class State>
bool save_by_index(const torch::optim::Optimizer& optimizer, torch::serialize::OutputArchive& out) {
  if (dynamic_cast<const Opt*>(&optimizer) == nullptr) return false;
  const auto& state = optimizer.state();
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      const auto it = state.find(key_of(params[i]));
      if (it == state.end()) continue;  // no step taken with this parameter yet
      torch::serialize::OutputArchive one;
      static_cast<const State&>(*it->second).serialize(one);
      out.write(std::to_string(g) + "." + std::to_string(i), one);
    }
  }
  return true;
}

template <class Opt, class State>
bool load_by_index(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& in) {
  if (dynamic_cast<Opt*>(&optimizer) == nullptr) return false;
  auto& state = optimizer.state();
  state.clear();
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      torch::serialize::InputArchive one;
      if (!in.try_read(std::to_string(g) + "." + std::to_string(i), one)) continue;
      auto s = std::make_unique<State>();
      s->serialize(one);
      state[key_of(params[i])] = std::move(s);
    }
  }
  return true;
}

bool save_known(const torch::optim::Optimizer& o, torch::serialize::OutputArchive& out) {
  using namespace torch::optim;
  return save_by_index<SGD, SGDParamState>(o, out) || save_by_index<Adam, AdamParamState>(o, out) ||
         save_by_index<AdamW, AdamWParamState>(o, out) ||
         save_by_index<Adagrad, AdagradParamState>(o, out) ||
         save_by_index<RMSprop, RMSpropParamState>(o, out);
}

bool load_known(torch::optim::Optimizer& o, torch::serialize::InputArchive& in) {
  using namespace torch::optim;
  return load_by_index<SGD, SGDParamState>(o, in) || load_by_index<Adam, AdamParamState>(o, in) ||
         load_by_index<AdamW, AdamWParamState>(o, in) ||
         load_by_index<Adagrad, AdagradParamState>(o, in) ||
         load_by_index<RMSprop, RMSpropParamState>(o, in);
}

}  // namespace

void save_optimizer(const torch::optim::Optimizer& optimizer,
                    torch::serialize::OutputArchive& archive) {
  torch::serialize::OutputArchive state, options;
  // Other optimizers (LBFGS, user-defined) keep libtorch's own, address-keyed format.
  const bool by_index = save_known(optimizer, state);
  if (!by_index) optimizer.save(state);
  const auto& groups = optimizer.param_groups();
  options.write("size", torch::tensor(static_cast<int64_t>(groups.size())));
  for (size_t i = 0; i < groups.size(); ++i) {
    torch::serialize::OutputArchive group;
    groups[i].options().serialize(group);
    options.write(std::to_string(i), group);
  }
  archive.write(by_index ? "state_by_index" : "state", state);
  archive.write("group_options", options);
}

void load_optimizer(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive) {
  torch::serialize::InputArchive state, options;
  const bool by_index = archive.try_read("state_by_index", state);
  if (!by_index) archive.read("state", state);
  archive.read("group_options", options);
  torch::Tensor size;
  options.read("size", size);
  auto& groups = optimizer.param_groups();
  TESSERA_CHECK(size.item<int64_t>() == static_cast<int64_t>(groups.size()),
                "the saved optimizer has ", size.item<int64_t>(), " parameter groups, this one ",
                groups.size());
  if (by_index) {
    TESSERA_CHECK(load_known(optimizer, state),
                  "the saved optimizer state is that of SGD, Adam, AdamW, Adagrad or RMSprop, "
                  "but this optimizer is none of them");
  } else {
    optimizer.load(state);
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    torch::serialize::InputArchive group;
    options.read(std::to_string(i), group);
    groups[i].options().serialize(group);
  }
}

}  // namespace detail
}  // namespace tessera
