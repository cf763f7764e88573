// `tessera bench engine`: the engine's control-plane cost and total time per training step on
// ResNet-50's 161 gradient tensors, with the response cache on and off, beside one
// MPI_Allreduce over the same bytes; and the latency of one 4 KiB allreduce through the engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/options.h"

namespace tessera {
namespace bench {

struct EngineBenchOptions {
  int steps = 20;
  int warmup = 3;
  int latency_iterations = 200;
  std::string json_path;
  engine::EngineOptions engine;  // the agreed settings' (options_from); the bench varies the cache
};

// The shapes of ResNet-50's parameters (torchvision order: conv1, bn1, layer1..4, fc).
std::vector<std::vector<int64_t>> resnet50_parameter_shapes();

int run_engine_bench(const EngineBenchOptions& options);

}  // namespace bench
}  // namespace tessera
