// comm's settings: declared here, once, and carried by every Communicator (comm.settings()).
// Collectives read their communicator's settings, never a process-wide value, so two
// communicators in one process may differ (a test's small segments, the engine's tuned ones).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/device_selector.h"
#include "comm/pipelining.h"
#include "comm/selector.h"
#include "common/settings.h"

namespace tessera {
namespace comm {

inline constexpr NumberSetting kTimeout{
    "TESSERA_TIMEOUT",
    300.0,
    "seconds",
    true,
    "",
    "longest any blocking wait in tessera may take before it fails with `TimeoutError` naming "
    "the peer it waited for"};
inline constexpr IntSetting kRanksPerNode{
    "TESSERA_RANKS_PER_NODE", 0, 0, 1 << 20,
    "groups consecutive ranks of each real node into pretend nodes of this size, so "
    "hierarchical algorithms and the cross-node phase are testable on one machine; `0` uses the "
    "real node split (`MPI_Comm_split_type` shared)"};
void check_override(const std::string& text);  // parse_override, for kAllreduce
inline constexpr TextSetting kAllreduce{
    "TESSERA_ALLREDUCE",
    "",
    "auto",
    "`ALGO` or `ALGO:LO-HI[;ALGO:LO-HI...]`, `ALGO` one of `auto ring rhd dbtree multicolor "
    "hierarchical mpi`, `LO`/`HI` byte sizes with optional `K`/`KiB`/`M`/`MiB`/`G`/`GiB` "
    "suffix, `HI` may be `max`; ranges inclusive and not overlapping",
    "allreduce algorithm by message size, e.g. `dbtree:0-65536;ring:65537-max`; sizes outside "
    "every range use auto. A malformed value is an error that quotes the bad part",
    check_override};
inline constexpr TextSetting kCostTable{
    "TESSERA_COST_TABLE", "", "built in", "a path to a JSON file",
    "cost table written by `tessera bench allreduce --calibrate`; `auto` uses its measured "
    "curves where the rank and node counts match, its fitted link parameters elsewhere. Rank 0 "
    "reads it for everyone"};
void check_device_backend(const std::string& text);  // parse_device_backend, for kDeviceBackend
inline constexpr TextSetting kDeviceBackend{
    "TESSERA_DEVICE_BACKEND",
    "auto",
    "auto",
    "`auto`, `nccl`, `ipc`, `staged` or `hierarchical`",
    "backend of the collectives on GPU buffers: `auto` takes NCCL where every rank has its own "
    "GPU, else CUDA IPC on one node, else hierarchical (IPC within nodes of equal size, staged "
    "across), else host staging; a forced backend that cannot run (NCCL with two ranks on one "
    "GPU) is an error saying why and which can",
    check_device_backend};

// What collectives on one communicator use. Every rank of a communicator holds the same.
struct Settings {
  double timeout_s = kTimeout.fallback;
  int ranks_per_node = static_cast<int>(kRanksPerNode.fallback);
  // The TESSERA_ALLREDUCE text and its parsed ranges (empty: auto at every size).
  std::string allreduce = kAllreduce.fallback;
  std::vector<SizeRange> allreduce_ranges;
  int colors = static_cast<int>(kColors.fallback);
  size_t segment_bytes = kSegmentBytes.fallback;
  size_t shm_bytes = kShmBytes.fallback;
  DeviceBackend device_backend = DeviceBackend::kAuto;
  // The table `auto` chooses by: built in, or TESSERA_COST_TABLE's (read by init on rank 0).
  std::shared_ptr<const CostTable> cost_table = std::make_shared<const CostTable>();

  // Sets the override and its parsed ranges together; throws InvalidArgument quoting a bad one.
  void set_allreduce(const std::string& text);
};

// The settings `values` give (defaults where they give none). Throws InvalidArgument naming the
// setting, quoting the value and saying what is accepted. The cost table stays built in: a path
// is read by init (rank 0 for everyone).
Settings settings_from(const SettingValues& values);
// comm's declarations, for docs/knobs.md and the unknown-name check.
std::vector<SettingInfo> declared_settings();

}  // namespace comm
}  // namespace tessera
