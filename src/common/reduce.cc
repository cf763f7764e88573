#include "common/reduce.h"

#include <cstdint>
#include <cstring>
#include <limits>

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
  TESSERA_CHECK(
      op != ReduceOp::kAdasum,
      "adasum is not an elementwise reduction: the engine runs it (comm::adasum_allreduce)");
  if (count == 0) return;
  table().reduce(dtype, op, a, b, out, count);
}

namespace {

template <class T>
void scale_integers(double factor, const void* in, void* out, size_t count) {
  const T* a = static_cast<const T*>(in);
  T* o = static_cast<T*>(out);
  // Past the type's range the conversion would be undefined: saturate instead.
  const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  for (size_t i = 0; i < count; ++i) {
    const double v = static_cast<double>(a[i]) * factor;
    o[i] = v <= lo ? std::numeric_limits<T>::lowest()
                   : (v >= hi ? std::numeric_limits<T>::max() : static_cast<T>(v));
  }
}

}  // namespace

void scale(DataType dtype, double factor, const void* in, void* out, size_t count) {
  if (count == 0) return;
  switch (dtype) {
    case DataType::kInt32:
      return scale_integers<int32_t>(factor, in, out, count);
    case DataType::kInt64:
      return scale_integers<int64_t>(factor, in, out, count);
    case DataType::kUInt8:
      return scale_integers<uint8_t>(factor, in, out, count);
    case DataType::kInt8:
      return scale_integers<int8_t>(factor, in, out, count);
    case DataType::kInt16:
      return scale_integers<int16_t>(factor, in, out, count);
    default:
      table().scale(dtype, factor, in, out, count);
  }
}

const char* reduce_isa() { return table().name; }

namespace {

template <class T>
void fill_typed(ReduceOp op, void* out, size_t count) {
  T v = T(0);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
    case ReduceOp::kBitOr:
    case ReduceOp::kAdasum:  // adasum(a, 0) = a
      v = T(0);
      break;
    case ReduceOp::kProduct:
      v = T(1);
      break;
    case ReduceOp::kMin:
      v = std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                               : std::numeric_limits<T>::max();
      break;
    case ReduceOp::kMax:
      v = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                               : std::numeric_limits<T>::lowest();
      break;
    case ReduceOp::kBitAnd:
      std::memset(&v, 0xff, sizeof(v));
      break;
  }
  T* p = static_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) p[i] = v;
}

// f16 and bf16 as bit patterns: 0, 1, +inf and -inf.
void fill_half(ReduceOp op, bool bf16, void* out, size_t count) {
  uint16_t v = 0;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
    case ReduceOp::kBitOr:
    case ReduceOp::kAdasum:
      v = 0;
      break;
    case ReduceOp::kProduct:
      v = bf16 ? 0x3f80 : 0x3c00;
      break;
    case ReduceOp::kMin:
      v = bf16 ? 0x7f80 : 0x7c00;
      break;
    case ReduceOp::kMax:
      v = bf16 ? 0xff80 : 0xfc00;
      break;
    case ReduceOp::kBitAnd:
      v = 0xffff;
      break;
  }
  uint16_t* p = static_cast<uint16_t*>(out);
  for (size_t i = 0; i < count; ++i) p[i] = v;
}

}  // namespace

void fill_identity(DataType dtype, ReduceOp op, void* out, size_t count) {
  switch (dtype) {
    case DataType::kFloat32:
      return fill_typed<float>(op, out, count);
    case DataType::kFloat64:
      return fill_typed<double>(op, out, count);
    case DataType::kFloat16:
      return fill_half(op, false, out, count);
    case DataType::kBFloat16:
      return fill_half(op, true, out, count);
    case DataType::kInt32:
      return fill_typed<int32_t>(op, out, count);
    case DataType::kInt64:
      return fill_typed<int64_t>(op, out, count);
    case DataType::kUInt8:
      return fill_typed<uint8_t>(op, out, count);
    case DataType::kInt8:
      return fill_typed<int8_t>(op, out, count);
    case DataType::kInt16:
      return fill_typed<int16_t>(op, out, count);
  }
}

}  // namespace tessera
