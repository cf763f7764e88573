// The wait between two cycles of the engine thread: a pure function, so the back-off can be
// tested exhaustively and the engine's own cycles checked against it (its cycle log records each
// cycle's vote and the wait it chose), neither depending on the speed of the machine.
#pragma once

#include <algorithm>

namespace tessera {
namespace engine {

// An idle engine still joins a cycle every cycle time: the other ranks may have work that needs
// everyone's vote. While every rank voted idle in the cycle just run (so all ranks agree), the
// wait doubles, up to `idle_backoff_ms`: an idle engine then costs the training thread next to
// nothing, at the price of up to that much latency for the first collective after a quiet
// spell. Any work brings it back to the cycle time (1 ms when the cycle time is 0). A back-off
// at or below the cycle time means none.
inline double next_wait_ms(bool all_idle, double current_ms, double cycle_time_ms,
                           double idle_backoff_ms) {
  const double base = cycle_time_ms > 0 ? cycle_time_ms : 1.0;
  return all_idle ? std::max(base, std::min(2 * current_ms, idle_backoff_ms)) : base;
}

}  // namespace engine
}  // namespace tessera
