#include "tune/timeline_workload.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace tessera {
namespace tune {
namespace {

struct Span {
  double ts = 0, end = 0;  // microseconds
};

}  // namespace

Workload workload_from_timeline(const std::string& json_text, const std::string& source,
                                double images_per_step) {
  TESSERA_CHECK(images_per_step > 0, "timeline ", source,
                ": images per step must be > 0 (the recorded run's batch per rank)");
  nlohmann::json events;
  try {
    events = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument("timeline " + source + " is not valid JSON: " + e.what());
  }
  if (!events.is_array()) {
    throw InvalidArgument("timeline " + source + " is not a JSON array of trace events");
  }
  std::map<int, std::string> rows;
  for (const auto& e : events) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name") {
      rows[e.value("tid", -1)] = e["args"].value("name", "");
    }
  }
  std::vector<Span> forward, backward, update;
  struct Enqueue {
    std::string name;
    double ts, bytes;
  };
  std::vector<Enqueue> enqueues;
  for (const auto& e : events) {
    if (e.value("ph", "") != "X") continue;
    const std::string row = rows[e.value("tid", -1)];
    const std::string name = e.value("name", "");
    const Span s{e.value("ts", 0.0), e.value("ts", 0.0) + e.value("dur", 0.0)};
    if (row == "train") {
      if (name == "FORWARD") forward.push_back(s);
      if (name == "BACKWARD") backward.push_back(s);
      if (name == "OPTIMIZER_STEP") update.push_back(s);
    } else if (name == "NEGOTIATE" && e.contains("args") && e["args"].contains("bytes") &&
               row.rfind("tessera.", 0) != 0) {
      // tessera's own collectives (the per-step index check, 16 bytes) are not gradients.
      enqueues.push_back({row, s.ts, e["args"]["bytes"].get<double>()});
    }
  }
  if (forward.empty() || backward.empty()) {
    throw InvalidArgument("timeline " + source +
                          " has no FORWARD and BACKWARD spans on a \"train\" row: record it from "
                          "`tessera train --timeline FILE`");
  }
  auto by_ts = [](const Span& a, const Span& b) { return a.ts < b.ts; };
  std::sort(forward.begin(), forward.end(), by_ts);
  std::sort(backward.begin(), backward.end(), by_ts);
  std::sort(update.begin(), update.end(), by_ts);
  // The last step whose backward ends before the timeline does and that enqueued gradients.
  for (size_t i = forward.size(); i-- > 0;) {
    const Span f = forward[i];
    auto b =
        std::find_if(backward.begin(), backward.end(), [&](const Span& s) { return s.ts >= f.ts; });
    if (b == backward.end()) continue;
    Workload w;
    w.name = source;
    w.images_per_step = images_per_step;
    for (const Enqueue& q : enqueues) {
      if (q.ts >= b->ts && q.ts <= b->end) {
        w.gradients.push_back({q.name, q.bytes, (q.ts - f.ts) * 1e-6});
      }
    }
    if (w.gradients.empty()) continue;
    double end = b->end;
    auto u =
        std::find_if(update.begin(), update.end(), [&](const Span& s) { return s.ts >= b->end; });
    const bool next_forward = i + 1 < forward.size();
    if (u != update.end() && (!next_forward || u->ts < forward[i + 1].ts)) end += u->end - u->ts;
    w.compute_s = (end - f.ts) * 1e-6;
    std::stable_sort(w.gradients.begin(), w.gradients.end(),
                     [](const Gradient& x, const Gradient& y) { return x.ready_s < y.ready_s; });
    return w;
  }
  throw InvalidArgument("timeline " + source +
                        ": no gradient was enqueued during a BACKWARD span (NEGOTIATE events with "
                        "their bytes); record it from `tessera train --timeline FILE`");
}

}  // namespace tune
}  // namespace tessera
