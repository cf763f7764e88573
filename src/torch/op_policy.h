// Internal to src/torch and the Python extension: Horovod's naming and refusal policy of one
// op, written once for both front ends (torch/context.h's attempt() applies it to the C++ ops;
// the extension exposes it to python/tessera, whose own argument checks run between the two).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tessera {
namespace detail {

// Horovod's naming of one op, for both front ends: `name` when given, else the next
// automatic name of (kind, process set), "allreduce.set0.noname.7". One counter per kind and
// set: ranks outside a set never count its ops, so the names agree on every member.
std::string take_name(const std::string& kind, const std::string& name, int process_set);

// The start of one op, for both front ends: the process set is checked (a rank outside it
// raises and takes no name), then whether a rank was lost (the job is ending: no new
// collective), then the name is taken.
std::string begin_op(const std::string& kind, const std::string& name, int process_set);

// Horovod's broadcast root: a rank of the whole job. Returns its rank within `process_set`;
// throws InvalidArgument naming the collective and the set's ranks when it is not a member.
int set_rank_of(int global_root, int process_set, const std::string& name);

// This rank refuses an op whose name it took: `name`, or for a group (members > 0) its
// members name.0 .. name.N-1 (Engine::refuse). Skipped when the core already refused the same
// name since this thread last took one, so that a front end wrapping a core call never refuses
// twice (a second refusal would be a new collective that nobody else enqueues).
void refuse(const std::string& name, int process_set, const std::string& reason,
            size_t members = 0);
// The same for an op whose names the caller gave (the DistributedOptimizer's groups).
void refuse(const std::vector<std::string>& names, int process_set, const std::string& reason);

}  // namespace detail
}  // namespace tessera
