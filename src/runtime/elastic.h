// Elastic training, the ranks' side (docs/reliability.md, "Elastic training"). `tessera run`'s
// supervisor (python/tessera/supervisor.py) relaunches a job that lost a rank on the hosts that
// are left, and one whose hosts grew on the larger set. It and the ranks talk through files in
// one folder, TESSERA_ELASTIC_DIR, which the supervisor sets for every rank and which must be
// shared by the launcher's host and every host of the job (as the snapshots in it are):
//
//   failures/g<G>.r<R>.json   rank R of generation G ends because of another rank (the liveness
//                             monitor's endings): what it knows of the loss, as JSON
//   hosts-updated             the supervisor: the generation that should restart on more hosts
//   g<G>.restart              rank 0: generation G left on purpose, for that update, after its
//                             snapshot
//
// Both front ends use these functions: the Python package (tessera.torch.elastic) and the
// built-in trainer (`tessera train --elastic`).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/settings.h"

namespace tessera {
namespace runtime {

inline constexpr TextSetting kElasticDir{
    "TESSERA_ELASTIC_DIR", "", "none", "a folder every host and the launcher share",
    "set by `tessera run --min-np/--max-np/...` (its supervisor) for the ranks: where they leave "
    "failure records and learn of new hosts (`docs/reliability.md`)"};
inline constexpr IntSetting kElasticGeneration{
    "TESSERA_ELASTIC_GENERATION", 0, 0, 1000000,
    "set by `tessera run`'s supervisor: how many times it has launched this job before"};
inline constexpr IntSetting kElasticSnapshotEvery{
    "TESSERA_ELASTIC_SNAPSHOT_EVERY", 1, 1, 1000000,
    "tessera.torch.elastic: rank 0 writes the committed state to the elastic folder every this "
    "many commits (a restart returns to the last one written; the survivors of a lost rank try "
    "to write theirs on the way out)"};

// What a rank knows when it ends because of another one.
struct FailureRecord {
  int generation = 0;
  int rank = -1;
  std::string host;
  int64_t step = -1;   // the last step the program reported (set_progress_step); -1: none
  std::string reason;  // the monitor's line
  std::vector<std::pair<int, std::string>> lost;  // the ranks it names as lost or failed, hosts
};

std::string encode_failure_record(const FailureRecord& record);
// InvalidArgument naming `source` and the field when the text is not a record.
FailureRecord decode_failure_record(const std::string& text, const std::string& source);
// failures/g<G>.r<R>.json under `dir`.
std::string failure_record_path(const std::string& dir, int generation, int rank);
// Whether the supervisor's notice in `dir` asks generation `generation` to restart on more hosts.
// A missing or unreadable notice is no.
bool hosts_update_pending(const std::string& dir, int generation);
std::string restart_marker_path(const std::string& dir, int generation);

// The process's elastic state, from the agreed settings (Session): empty dir = not elastic.
void configure_elastic(const SettingValues& settings);
bool elastic_enabled();
const std::string& elastic_dir();
int elastic_generation();
int elastic_snapshot_every();
// The program's progress, written into failure records: the last committed step.
void set_progress_step(int64_t step);
int64_t progress_step();
// Writes this rank's failure record when elastic (never throws: the process is ending). The first
// record of a rank in a generation stands: its first cause is the one the supervisor must see
// (a rank that failed is later also told by the launcher that its peers ended).
void record_failure(int rank, const std::string& host, const std::string& reason,
                    const std::vector<std::pair<int, std::string>>& lost);
// This rank failed with `error` (an exception of its own): a record naming itself, on its host.
void record_own_failure(int rank, const std::string& error);
// Rank 0, after the snapshot: this generation ends on purpose so the supervisor relaunches it on
// the larger set. Throws InvalidArgument when the marker cannot be written.
void mark_restart_for_hosts();

}  // namespace runtime
}  // namespace tessera
