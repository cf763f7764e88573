// A workload from a real run: the engine's timeline (TESSERA_TIMELINE) of `tessera train` holds
// the trainer's FORWARD, BACKWARD and OPTIMIZER_STEP spans on its "train" row and, for every
// gradient, a NEGOTIATE event that begins when the gradient hook enqueued it, with its bytes.
// One step of it (the last complete one) gives the compute time and each gradient's size and
// ready time. Pure: it reads the JSON text.
#pragma once

#include <string>

#include "tune/simulator.h"

namespace tessera {
namespace tune {

// Throws InvalidArgument naming `source` and what is missing (no trainer spans, no gradients
// enqueued during backward, not a JSON array of trace events).
Workload workload_from_timeline(const std::string& json_text, const std::string& source,
                                double images_per_step);

}  // namespace tune
}  // namespace tessera
