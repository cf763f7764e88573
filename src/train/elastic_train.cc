#include "train/elastic_train.h"

#include <unistd.h>

#include <cstdio>

#include "common/error.h"
#include "tessera/torch.h"
#include "train/on_root.h"

namespace tessera {
namespace train {

void check_elastic_options(const TrainOptions& o) {
  if (!o.elastic) return;
  TESSERA_CHECK(!o.checkpoint.empty() && o.checkpoint_every > 0,
                "--elastic commits through checkpoints: give --checkpoint FILE (on storage every "
                "host shares) and --checkpoint-every N");
  TESSERA_CHECK(o.resume.empty(),
                "--elastic resumes from --checkpoint itself when it exists; leave out --resume");
}

std::string elastic_resume_path(bool dist, const TrainOptions& o) {
  const std::string found = on_root(dist, "elastic.resume", [&] {
    return std::string(access(o.checkpoint.c_str(), R_OK) == 0 ? "1" : "0");
  });
  return found == "1" ? o.checkpoint : "";
}

bool leave_for_more_hosts(int64_t steps_done, bool root) {
  set_progress_step(steps_done);
  if (!check_host_updates()) return false;
  if (root) {
    mark_restart_for_hosts();
    std::printf(
        "elastic: the supervisor found more hosts; leaving after the checkpoint of step "
        "%lld to restart on them\n",
        static_cast<long long>(steps_done));
    std::fflush(stdout);
  }
  return true;
}

}  // namespace train
}  // namespace tessera
