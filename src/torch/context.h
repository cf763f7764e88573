// Internal to src/torch: the process's tessera context behind the free functions of
// include/tessera/torch.h (Horovod's hvd.init() state): the world communicator and the engine.
// The engine itself holds no static state; this is the one place that keeps a default.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "common/settings.h"
#include "engine/engine.h"
#include "gpu/device.h"
#include "tune/step_tuner.h"

namespace tessera {
namespace detail {

struct Context {
  SettingValues settings;  // what every rank agreed on at init
  std::unique_ptr<comm::Communicator> world;
  // This rank's GPU, made at its first CUDA tensor (device_tensors.h); declared before the
  // engine, which uses it, so that it outlives it.
  std::unique_ptr<gpu::Device> device;
  std::unique_ptr<engine::Engine> engine;
  // TESSERA_AUTOTUNE=1: fed by every DistributedOptimizer::step (null otherwise).
  std::unique_ptr<tune::StepTuner> tuner;
};

// Throws InvalidArgument ("call tessera::init() first") when not initialised.
Context& context();
// The next automatic name for an unnamed collective of `kind` ("allreduce.noname.7").
std::string auto_name(const char* kind);

}  // namespace detail
}  // namespace tessera
