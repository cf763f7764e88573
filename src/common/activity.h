// What this process is doing, for the message it prints when the job ends abnormally.
//
// A rank that learns that another rank died (runtime/liveness.h) or that the launcher is
// terminating it says what it was in the middle of: the training step and phase, the
// collectives the engine still had in flight. Layers above comm/ register reporters here, so
// the liveness monitor (in comm/) can describe them without depending on them.
#pragma once

#include <functional>
#include <string>

namespace tessera {
namespace activity {

// The current phase of the caller's work, e.g. "step 37/200: backward". Cheap (one short
// string copy under a mutex); called a few times per training step.
void set_phase(const std::string& phase);
std::string phase();

// A function that describes some in-flight work in one line, or returns "" when there is none.
// Reporters must not block (they run on the liveness thread while other threads keep running)
// nor call into this registry (they run under its lock).
using Reporter = std::function<std::string()>;
// Returns an id for remove_reporter.
int add_reporter(Reporter reporter);
void remove_reporter(int id);

// "step 37/200: backward; engine: 3 collectives in flight: a (allreduce), ..." or "idle".
std::string describe();

}  // namespace activity
}  // namespace tessera
