// Reduction kernels. This file is compiled several times, each with different -m flags and
// TESSERA_ISA set to the namespace name (see src/common/CMakeLists.txt); reduce.cc picks one.
// Plain loops over restrict-free pointers: the compiler vectorises them for the ISA at hand and
// adds its own overlap check, so out may alias an input.
#include <cstdint>
#include <cstring>

#include "common/dtype.h"
#include "common/half.h"

#ifndef TESSERA_ISA
#error "TESSERA_ISA must name the instruction set namespace"
#endif

namespace tessera {
namespace kernels {
namespace TESSERA_ISA {
namespace {

struct Sum {
  template <typename T>
  static T apply(T a, T b) {
    return a + b;
  }
};
struct Min {
  template <typename T>
  static T apply(T a, T b) {
    return b < a ? b : a;
  }
};
struct Max {
  template <typename T>
  static T apply(T a, T b) {
    return a < b ? b : a;
  }
};
struct Prod {
  template <typename T>
  static T apply(T a, T b) {
    return a * b;
  }
};

struct BitAnd {
  template <typename T>
  static T apply(T a, T b) {
    return a & b;
  }
};
struct BitOr {
  template <typename T>
  static T apply(T a, T b) {
    return a | b;
  }
};

template <typename T, typename Op>
void binary(const void* a, const void* b, void* out, size_t count) {
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  T* z = static_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) z[i] = static_cast<T>(Op::apply(x[i], y[i]));
}

// bf16 <-> f32 by bit manipulation; integer ops vectorise on every ISA.
inline float bf16_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  // Round to nearest even; keep NaNs NaN (quiet) instead of rounding them to infinity.
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return nan ? static_cast<uint16_t>((bits >> 16) | 0x40u) : static_cast<uint16_t>(rounded);
}
using detail::Half;
inline float f16_to_f32(uint16_t h) {
  Half v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}
inline uint16_t f32_to_f16(float f) {
  const Half v = static_cast<Half>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}

template <typename Op>
void binary_bf16(const void* a, const void* b, void* out, size_t count) {
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  uint16_t* z = static_cast<uint16_t*>(out);
  for (size_t i = 0; i < count; ++i) {
    z[i] = f32_to_bf16(Op::apply(bf16_to_f32(x[i]), bf16_to_f32(y[i])));
  }
}

template <typename Op>
void binary_f16(const void* a, const void* b, void* out, size_t count) {
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  uint16_t* z = static_cast<uint16_t*>(out);
  for (size_t i = 0; i < count; ++i) {
    z[i] = f32_to_f16(Op::apply(f16_to_f32(x[i]), f16_to_f32(y[i])));
  }
}

// Integer dtypes alone: bitwise ops exist only there, and check_op_supported refuses them on
// floating dtypes before any kernel runs.
template <typename Op>
void dispatch_integer(DataType dtype, const void* a, const void* b, void* out, size_t count) {
  switch (dtype) {
    case DataType::kInt32:
      return binary<int32_t, Op>(a, b, out, count);
    case DataType::kInt64:
      return binary<int64_t, Op>(a, b, out, count);
    case DataType::kUInt8:
      return binary<uint8_t, Op>(a, b, out, count);
    case DataType::kInt8:
      return binary<int8_t, Op>(a, b, out, count);
    case DataType::kInt16:
      return binary<int16_t, Op>(a, b, out, count);
    default:
      return;
  }
}

template <typename Op>
void dispatch_dtype(DataType dtype, const void* a, const void* b, void* out, size_t count) {
  switch (dtype) {
    case DataType::kFloat32:
      return binary<float, Op>(a, b, out, count);
    case DataType::kFloat64:
      return binary<double, Op>(a, b, out, count);
    case DataType::kFloat16:
      return binary_f16<Op>(a, b, out, count);
    case DataType::kBFloat16:
      return binary_bf16<Op>(a, b, out, count);
    default:
      return dispatch_integer<Op>(dtype, a, b, out, count);
  }
}

}  // namespace

void reduce(DataType dtype, ReduceOp op, const void* a, const void* b, void* out, size_t count) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return dispatch_dtype<Sum>(dtype, a, b, out, count);
    case ReduceOp::kMin:
      return dispatch_dtype<Min>(dtype, a, b, out, count);
    case ReduceOp::kMax:
      return dispatch_dtype<Max>(dtype, a, b, out, count);
    case ReduceOp::kProduct:
      return dispatch_dtype<Prod>(dtype, a, b, out, count);
    case ReduceOp::kBitAnd:
      return dispatch_integer<BitAnd>(dtype, a, b, out, count);
    case ReduceOp::kBitOr:
      return dispatch_integer<BitOr>(dtype, a, b, out, count);
    case ReduceOp::kAdasum:
      return;  // not elementwise: the dispatcher refuses it (common/reduce.cc)
  }
}

void scale(DataType dtype, double factor, const void* in, void* out, size_t count) {
  switch (dtype) {
    case DataType::kFloat32: {
      const float* x = static_cast<const float*>(in);
      float* z = static_cast<float*>(out);
      const float f = static_cast<float>(factor);
      for (size_t i = 0; i < count; ++i) z[i] = x[i] * f;
      return;
    }
    case DataType::kFloat64: {
      const double* x = static_cast<const double*>(in);
      double* z = static_cast<double*>(out);
      for (size_t i = 0; i < count; ++i) z[i] = x[i] * factor;
      return;
    }
    case DataType::kFloat16: {
      const uint16_t* x = static_cast<const uint16_t*>(in);
      uint16_t* z = static_cast<uint16_t*>(out);
      const float f = static_cast<float>(factor);
      for (size_t i = 0; i < count; ++i) z[i] = f32_to_f16(f16_to_f32(x[i]) * f);
      return;
    }
    case DataType::kBFloat16: {
      const uint16_t* x = static_cast<const uint16_t*>(in);
      uint16_t* z = static_cast<uint16_t*>(out);
      const float f = static_cast<float>(factor);
      for (size_t i = 0; i < count; ++i) z[i] = f32_to_bf16(bf16_to_f32(x[i]) * f);
      return;
    }
    default:
      return;  // integers are refused by the caller (check_op_supported)
  }
}

}  // namespace TESSERA_ISA
}  // namespace kernels
}  // namespace tessera
