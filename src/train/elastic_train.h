// `tessera train --elastic`: the built-in trainer under `tessera run`'s supervisor
// (docs/reliability.md, "Elastic training"). Its commits are its --checkpoint-every writes:
// a relaunched job continues from the last one, and after each it learns whether the supervisor
// found more hosts (the same collective check as tessera.torch.elastic's commit).
#pragma once

#include <cstdint>
#include <string>

#include "train/trainer.h"

namespace tessera {
namespace train {

// InvalidArgument naming the flag: --elastic needs --checkpoint and --checkpoint-every, and
// takes no --resume (the checkpoint is where it resumes).
void check_elastic_options(const TrainOptions& o);
// Collective: --checkpoint when rank 0 finds it (a relaunch), else "" (the job's first start).
std::string elastic_resume_path(bool dist, const TrainOptions& o);
// Collective, after the checkpoint of `steps_done` is written: the progress step for the failure
// records, then whether to leave for a restart on more hosts (rank 0 marks it and says so).
bool leave_for_more_hosts(int64_t steps_done, bool root);

}  // namespace train
}  // namespace tessera
