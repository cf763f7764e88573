// The engine's settings: declared here, once, with the two structs that carry them. Tunables are
// what the autotuner (src/tune) searches and Engine::set_tunables switches on every rank at one
// agreed point; EngineOptions adds what stays fixed for an engine's life.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "comm/settings.h"
#include "common/settings.h"

namespace tessera {
namespace engine {

inline constexpr NumberSetting kCycleTime{
    "TESSERA_CYCLE_TIME",
    1.0,
    "milliseconds",
    false,
    "a cycle as soon as work arrives",
    "time between the engine's negotiation cycles; `0` starts a cycle as soon as work arrives "
    "(an idle engine still joins a cycle every millisecond, so that ranks with work are not kept "
    "waiting)"};
inline constexpr NumberSetting kIdleBackoff{
    "TESSERA_IDLE_BACKOFF",
    8.0,
    "milliseconds",
    false,
    "",
    "while the vote says every rank is idle, the wait between cycles doubles (from the cycle "
    "time) up to this, so an idle engine does not take the cores from the training threads; the "
    "first collective after a quiet spell waits at most this long. Values at or below the cycle "
    "time turn the back-off off"};
inline constexpr BytesSetting kFusionThreshold{
    "TESSERA_FUSION_THRESHOLD", size_t{128} << 20, 0, size_t{1} << 40,
    "ready tensors of a compatible type are packed into one fusion buffer up to this size; `0` "
    "turns fusion off"};
inline constexpr IntSetting kCacheCapacity{
    "TESSERA_CACHE_CAPACITY", 1024, 0, 1 << 20,
    "entries of the engine's response cache (least recently used evicted); `0` turns it off"};
inline constexpr NumberSetting kStallCheckTime{
    "TESSERA_STALL_CHECK_TIME",
    60.0,
    "seconds",
    true,
    "",
    "a tensor that waits longer than this for other ranks is reported with the ranks it waits on "
    "(a cached tensor falls back to the coordinator so the late ranks can be named)"};
inline constexpr NumberSetting kStallShutdownTime{
    "TESSERA_STALL_SHUTDOWN_TIME",
    300.0,
    "seconds",
    false,
    "never, as Horovod's default",
    "a stall longer than this fails every pending handle, on every rank, with the stall report "
    "(the tensor, the ranks that enqueued it and those that did not): ranks that enqueue "
    "different tensors end instead of waiting forever"};
inline constexpr TextSetting kTimeline{
    "TESSERA_TIMELINE", "", "none", "a path to a JSON file",
    "Chrome/Perfetto trace of the engine (negotiation, queue, fusion copies, collectives), "
    "written by rank 0"};

// The settings the autotuner changes while training runs. Every rank must hold the same values.
// The last three are the engine communicator's (comm::Settings), tuned for the engine only.
struct Tunables {
  double cycle_time_ms = kCycleTime.fallback;
  size_t fusion_threshold = kFusionThreshold.fallback;
  bool cache_enabled =
      kCacheCapacity.fallback > 0;  // off: every tensor goes through the coordinator
  std::string allreduce = comm::kAllreduce.fallback;  // TESSERA_ALLREDUCE's grammar
  int colors = static_cast<int>(comm::kColors.fallback);
  size_t segment_bytes = comm::kSegmentBytes.fallback;
  bool operator==(const Tunables& o) const;
  bool operator!=(const Tunables& o) const { return !(*this == o); }
};

struct EngineOptions {
  Tunables tunables;
  double idle_backoff_ms = kIdleBackoff.fallback;
  size_t cache_capacity = static_cast<size_t>(kCacheCapacity.fallback);  // when the cache is on
  double stall_check_s = kStallCheckTime.fallback;
  double stall_shutdown_s = kStallShutdownTime.fallback;  // 0: never
  std::string timeline;                                   // rank 0's trace ("": none)
  double timeout_s = comm::kTimeout.fallback;             // the engine's own waits
};

// The options `values` give, defaults elsewhere. Throws InvalidArgument as comm's settings do.
EngineOptions options_from(const SettingValues& values);
// Defaults, with the communicator's algorithm settings and timeout: an engine built without
// options tunes nothing away from its communicator.
EngineOptions options_for(const comm::Settings& comm_settings);
// The communicator settings of an engine running `t`: `base` with t's algorithm, colors and
// segments. Throws InvalidArgument for a bad range text.
comm::Settings with_tunables(comm::Settings base, const Tunables& t);

// One line per field, JSON: how set_tunables sends them and how logs show them.
std::string to_json(const Tunables& t);
Tunables tunables_from_json(const std::string& text);

// The engine's declarations, for docs/knobs.md and the unknown-name check.
std::vector<SettingInfo> declared_settings();

}  // namespace engine
}  // namespace tessera
