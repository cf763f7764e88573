#include "engine/options.h"

#include <nlohmann/json.hpp>

namespace tessera {
namespace engine {

// The one list of Tunables' fields: encoding, decoding and equality all go through it.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Tunables, cycle_time_ms, fusion_threshold, cache_enabled,
                                   allreduce, colors, segment_bytes)

bool Tunables::operator==(const Tunables& o) const {
  return nlohmann::json(*this) == nlohmann::json(o);
}

std::string to_json(const Tunables& t) { return nlohmann::json(t).dump(); }

Tunables tunables_from_json(const std::string& text) {
  return nlohmann::json::parse(text).get<Tunables>();
}

EngineOptions options_from(const SettingValues& values) {
  EngineOptions o = options_for(comm::settings_from(values));
  o.tunables.cycle_time_ms = kCycleTime.get(values);
  o.tunables.fusion_threshold = kFusionThreshold.get(values);
  o.cache_capacity = static_cast<size_t>(kCacheCapacity.get(values));
  o.tunables.cache_enabled = o.cache_capacity > 0;
  if (o.cache_capacity == 0) o.cache_capacity = static_cast<size_t>(kCacheCapacity.fallback);
  o.idle_backoff_ms = kIdleBackoff.get(values);
  o.stall_check_s = kStallCheckTime.get(values);
  o.stall_shutdown_s = kStallShutdownTime.get(values);
  o.timeline = kTimeline.get(values);
  return o;
}

EngineOptions options_for(const comm::Settings& s) {
  EngineOptions o;
  o.tunables.allreduce = s.allreduce;
  o.tunables.colors = s.colors;
  o.tunables.segment_bytes = s.segment_bytes;
  o.timeout_s = s.timeout_s;
  return o;
}

comm::Settings with_tunables(comm::Settings base, const Tunables& t) {
  base.set_allreduce(t.allreduce);
  base.colors = t.colors;
  base.segment_bytes = t.segment_bytes;
  return base;
}

std::vector<SettingInfo> declared_settings() {
  return {kCycleTime.info(),     kIdleBackoff.info(),    kFusionThreshold.info(),
          kCacheCapacity.info(), kStallCheckTime.info(), kStallShutdownTime.info(),
          kTimeline.info()};
}

}  // namespace engine
}  // namespace tessera
