#include "common/activity.h"

#include <map>
#include <mutex>

namespace tessera {
namespace activity {
namespace {

struct Registry {
  std::mutex mu;
  std::string phase;
  std::map<int, Reporter> reporters;
  int next_id = 0;
};

Registry& registry() {
  // Never destroyed: a reporter may be removed, or describe() called, from a thread that outlives
  // static destruction at exit.
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

void set_phase(const std::string& phase) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.phase = phase;
}

std::string phase() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.phase;
}

int add_reporter(Reporter reporter) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const int id = r.next_id++;
  r.reporters.emplace(id, std::move(reporter));
  return id;
}

void remove_reporter(int id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.reporters.erase(id);
}

std::string describe() {
  Registry& r = registry();
  // Reporters run under the lock, so that remove_reporter (called as their owner is destroyed)
  // waits until no reporter of theirs is running.
  std::lock_guard<std::mutex> lock(r.mu);
  std::string out = r.phase;
  for (auto& [id, report] : r.reporters) {
    const std::string line = report();
    if (line.empty()) continue;
    if (!out.empty()) out += "; ";
    out += line;
  }
  return out.empty() ? "nothing (idle)" : out;
}

}  // namespace activity
}  // namespace tessera
