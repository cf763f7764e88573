// The public API's elastic calls (include/tessera/torch.h) over runtime/elastic.h: what both
// front ends (tessera.torch.elastic and `tessera train --elastic`) call at each commit.
#include "runtime/elastic.h"

#include <torch/torch.h>

#include "tessera/torch.h"

namespace tessera {

bool elastic_job() { return runtime::elastic_enabled(); }
int elastic_generation() { return runtime::elastic_generation(); }
std::string elastic_dir() { return runtime::elastic_dir(); }
int elastic_snapshot_every() { return runtime::elastic_snapshot_every(); }
void set_progress_step(int64_t step) { runtime::set_progress_step(step); }

// Rank 0's reading decides: the notice may land between two ranks' reads of a shared folder.
bool check_host_updates() {
  if (!runtime::elastic_enabled()) return false;
  const bool mine =
      rank() == 0 && runtime::hosts_update_pending(runtime::elastic_dir(), elastic_generation());
  torch::Tensor flag = torch::tensor({mine ? 1 : 0}, torch::kInt32);
  if (size() > 1) broadcast_(flag, 0, "tessera.elastic.hosts_updated");
  return flag.item<int32_t>() != 0;
}

void mark_restart_for_hosts() { runtime::mark_restart_for_hosts(); }

}  // namespace tessera
