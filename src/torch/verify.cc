// verify_across_ranks: one 16-byte allreduce when the ranks agree; when they do not, every
// rank's description is gathered and the same message (common/agreement.h) is raised on every
// rank. Used before a run's first collective on its model and options, where a difference would
// otherwise surface as a hang or as silently wrong averages.
#include <cstring>

#include "common/agreement.h"
#include "common/error.h"
#include "common/strings.h"
#include "engine/engine.h"
#include "tessera/torch.h"
#include "torch/context.h"

namespace tessera {

void verify_across_ranks(const std::string& what, const std::string& description, int process_set) {
  static int64_t calls = 0;  // every rank calls in the same order: names match
  const std::string name = "tessera.verify." + what + "." + std::to_string(calls++);
  const int64_t d = static_cast<int64_t>(fnv1a64(description));
  // max(d) and max(~d) = ~min(d) in one allreduce: equal exactly when every rank has d.
  torch::Tensor both = torch::tensor({d, ~d}, torch::kInt64);
  allreduce_(both, name, ReduceOp::kMax, process_set);
  if (both[0].item<int64_t>() == ~both[1].item<int64_t>()) return;
  // They differ: gather every rank's description (lengths first) and name the difference.
  torch::Tensor len = torch::tensor({static_cast<int64_t>(description.size())}, torch::kInt64);
  const torch::Tensor lens = allgather(len, name + ".lengths", process_set);
  torch::Tensor mine = torch::empty({static_cast<int64_t>(description.size())}, torch::kUInt8);
  if (!description.empty()) std::memcpy(mine.data_ptr(), description.data(), description.size());
  const torch::Tensor all = allgather(mine, name + ".text", process_set);
  std::vector<std::string> by_rank;
  const char* p = static_cast<const char*>(all.data_ptr());
  for (int64_t r = 0; r < lens.numel(); ++r) {
    const int64_t n = lens[r].item<int64_t>();
    by_rank.emplace_back(p, static_cast<size_t>(n));
    p += n;
  }
  const std::string diff = describe_disagreement(by_rank);
  throw InvalidArgument("the ranks disagree on " + what + ": " +
                        (diff.empty() ? std::string("(their digests differ)") : diff));
}

std::string describe_parameters(const torch::OrderedDict<std::string, torch::Tensor>& named,
                                bool only_trainable) {
  std::string out;
  for (const auto& kv : named) {
    const torch::Tensor& t = kv.value();
    if (only_trainable && !t.requires_grad()) continue;
    out += kv.key() + ": [";
    for (int64_t i = 0; i < t.dim(); ++i) out += (i ? ", " : "") + std::to_string(t.size(i));
    out += "] " + std::string(c10::toString(t.scalar_type())) + "\n";
  }
  return out;
}

int join(int process_set) {
  engine::Handle h = global_engine().join(process_set);
  h.wait();
  return h.last_joined();
}

}  // namespace tessera
