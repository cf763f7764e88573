// Internal to src/torch: the process's tessera context behind the free functions of
// include/tessera/torch.h (Horovod's hvd.init() state): the session that tessera::init opened
// (runtime/session.h) and this rank's GPU. The engine itself holds no static state; this is the
// one place that keeps a default.
#pragma once

#include <memory>
#include <string>

#include "common/error.h"
#include "common/settings.h"
#include "engine/engine.h"
#include "gpu/device.h"
#include "runtime/session.h"
#include "tessera/torch.h"
#include "torch/op_policy.h"

namespace tessera {
namespace detail {

struct Context {
  // This rank's GPU, made at its first CUDA tensor (device_tensors.h); declared before the
  // session, whose engine uses it, so that it outlives it.
  std::unique_ptr<gpu::Device> device;
  // The process: agreed settings, world communicator, engine, tuner (runtime/session.h).
  std::unique_ptr<runtime::Session> session;
  engine::Engine& engine() const { return session->engine(); }
};

// Throws InvalidArgument ("call tessera::init() first") when not initialised.
Context& context();
// What init's options open the session with.
runtime::SessionOptions session_options(const InitOptions& options);
// The policy every op follows, C++ and Python alike: begin_op (op_policy.h) checks the set and
// takes the name; then `start(name)` checks the arguments and enqueues. If it throws, this rank
// refuses the name, so that the ranks that enqueued it fail within a cycle instead of stalling,
// and the next automatic names still agree everywhere. `members` > 0: a group, whose members
// are name.0 .. name.N-1. (The extension's Op applies the same steps around Python's.)
template <class Start>
auto attempt(const char* kind, const std::string& name, int process_set, Start&& start,
             size_t members = 0) -> decltype(start(name)) {
  const std::string taken = begin_op(kind, name, process_set);
  try {
    return start(taken);
  } catch (const std::exception& e) {
    refuse(taken, process_set, e.what(), members);
    throw;
  }
}

}  // namespace detail

// Internal to tessera's own layers and tests (not in include/tessera/torch.h, whose users see
// only tensors): the engine behind every call (stats, tunables). Throws if not init().
engine::Engine& global_engine();

}  // namespace tessera
