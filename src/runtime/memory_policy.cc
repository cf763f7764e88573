#include "runtime/memory_policy.h"

#include <malloc.h>
#include <sys/resource.h>

#include "common/error.h"

namespace tessera {
namespace runtime {

MallocPolicy parse_malloc_policy(const std::string& text) {
  if (text == "keep") return MallocPolicy::kKeep;
  if (text == "system") return MallocPolicy::kSystem;
  throw InvalidArgument("TESSERA_MALLOC_POLICY: '" + text +
                        "' is not a policy; accepted: keep (reuse freed buffers), system (glibc's "
                        "defaults)");
}

std::string apply_malloc_policy(MallocPolicy policy) {
  if (policy == MallocPolicy::kSystem) return "system (glibc defaults)";
  // glibc refuses an mmap threshold above HEAP_MAX_SIZE / 2 (32 MiB on 64-bit) with 0: try the
  // largest it accepts. Setting it also turns off the dynamic threshold.
  size_t mmap_threshold = size_t{1} << 30;
  while (mmap_threshold >= (size_t{1} << 20) &&
         mallopt(M_MMAP_THRESHOLD, static_cast<int>(mmap_threshold)) == 0) {
    mmap_threshold /= 2;
  }
  // The heap top is never trimmed back to the kernel below 2 GiB - 1 (mallopt takes an int).
  mallopt(M_TRIM_THRESHOLD, 0x7fffffff);
  return "keep (mmap threshold " + std::to_string(mmap_threshold >> 20) +
         " MiB, trim threshold 2 GiB)";
}

long minor_page_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

}  // namespace runtime
}  // namespace tessera
