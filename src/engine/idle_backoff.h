// The wait between two cycles of the engine thread: a pure function, so the back-off can be
// tested exhaustively and the engine's own cycles checked against it (its cycle log records each
// cycle's vote and the wait it chose), neither depending on the speed of the machine.
#pragma once

#include <algorithm>

namespace tessera {
namespace engine {

// The wait between cycles while there is work: the cycle time, or 1 ms when it is 0 (a cycle time
// of 0 asks for "as often as useful", not a busy loop of the engine thread).
inline double base_wait_ms(double cycle_time_ms) { return cycle_time_ms > 0 ? cycle_time_ms : 1.0; }

// An idle engine still joins a cycle every cycle time: the other ranks may have work that needs
// everyone's vote. While every rank voted idle in the cycle just run (so all ranks agree), the
// wait doubles, up to `idle_backoff_ms`: an idle engine then costs the training thread next to
// nothing, at the price of up to that much latency for the first collective after a quiet
// spell. Any work brings it back to base_wait_ms. A back-off
// at or below the cycle time means none.
inline double next_wait_ms(bool all_idle, double current_ms, double cycle_time_ms,
                           double idle_backoff_ms) {
  const double base = base_wait_ms(cycle_time_ms);
  return all_idle ? std::max(base, std::min(2 * current_ms, idle_backoff_ms)) : base;
}

}  // namespace engine
}  // namespace tessera
