// The process memory policy tessera sets at init (TESSERA_MALLOC_POLICY, docs/training.md).
//
// libtorch allocates each large activation and gradient buffer afresh every step. Under glibc's
// defaults a block above the (dynamic) mmap threshold is mmap'ed and unmapped on free, and the
// heap top above M_TRIM_THRESHOLD is returned to the kernel, so every step page-faults its
// working set back in (zeroed by the kernel): on a 2-core machine that is a large share of a
// ResNet-50 step. The "keep" policy raises both thresholds so freed buffers stay in the heap
// and are reused, trading resident memory for fewer page faults.
#pragma once

#include <string>

#include "common/settings.h"

namespace tessera {
namespace runtime {

inline constexpr ChoiceSetting kMallocPolicy{
    "TESSERA_MALLOC_POLICY", "keep", "keep,system",
    "process memory policy set at `tessera::init` (docs/training.md): `keep` raises glibc's mmap "
    "threshold (to the largest it accepts, 32 MiB) and trim threshold (2 GiB) so libtorch's "
    "activation buffers are reused rather than returned to the kernel and page-faulted back "
    "every step; `system` keeps glibc's defaults (and whatever `GLIBC_TUNABLES` says)"};

enum class MallocPolicy { kKeep, kSystem };

// kMallocPolicy's word ("keep" or "system") as a policy.
MallocPolicy parse_malloc_policy(const std::string& text);
// Applies the policy to this process (mallopt). Returns a description of what was set.
std::string apply_malloc_policy(MallocPolicy policy);
// Minor page faults of this process so far (getrusage), for measuring the policy.
long minor_page_faults();

}  // namespace runtime
}  // namespace tessera
