#include "common/reduce.h"

#include "common/error.h"

namespace tessera {
namespace kernels {
#define TESSERA_DECLARE_ISA(isa)                                            \
  namespace isa {                                                           \
  void reduce(DataType, ReduceOp, const void*, const void*, void*, size_t); \
  void scale(DataType, double, const void*, void*, size_t);                 \
  }
TESSERA_DECLARE_ISA(baseline)
#if defined(TESSERA_HAVE_X86_KERNELS)
TESSERA_DECLARE_ISA(avx2)
TESSERA_DECLARE_ISA(avx512)
#endif
#undef TESSERA_DECLARE_ISA
}  // namespace kernels

namespace {

struct KernelTable {
  const char* name;
  void (*reduce)(DataType, ReduceOp, const void*, const void*, void*, size_t);
  void (*scale)(DataType, double, const void*, void*, size_t);
};

KernelTable choose() {
#if defined(TESSERA_HAVE_X86_KERNELS)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl")) {
    return {"avx512", kernels::avx512::reduce, kernels::avx512::scale};
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return {"avx2", kernels::avx2::reduce, kernels::avx2::scale};
  }
#endif
  return {"baseline", kernels::baseline::reduce, kernels::baseline::scale};
}

// Chosen once, thread-safely, on first use.
const KernelTable& table() {
  static const KernelTable t = choose();
  return t;
}

}  // namespace

void reduce(DataType dtype, ReduceOp op, const void* a, const void* b, void* out, size_t count) {
  if (count == 0) return;
  table().reduce(dtype, op, a, b, out, count);
}

void scale(DataType dtype, double factor, const void* in, void* out, size_t count) {
  TESSERA_CHECK(is_floating(dtype), "scale() needs a floating dtype, got ", dtype_name(dtype));
  if (count == 0) return;
  table().scale(dtype, factor, in, out, count);
}

const char* reduce_isa() { return table().name; }

}  // namespace tessera
