#include "common/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "common/half.h"

namespace tessera {

size_t dtype_size(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return 4;
    case DataType::kFloat64:
      return 8;
    case DataType::kFloat16:
      return 2;
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
      return 4;
    case DataType::kInt64:
      return 8;
    case DataType::kUInt8:
    case DataType::kInt8:
      return 1;
    case DataType::kInt16:
      return 2;
  }
  TESSERA_ASSERT(false, "unknown DataType ", static_cast<int>(dtype));
}

const char* dtype_name(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return "f32";
    case DataType::kFloat64:
      return "f64";
    case DataType::kFloat16:
      return "f16";
    case DataType::kBFloat16:
      return "bf16";
    case DataType::kInt32:
      return "i32";
    case DataType::kInt64:
      return "i64";
    case DataType::kUInt8:
      return "u8";
    case DataType::kInt8:
      return "i8";
    case DataType::kInt16:
      return "i16";
  }
  return "?";
}

DataType parse_dtype(const std::string& name) {
  if (name == "f32" || name == "float" || name == "float32") return DataType::kFloat32;
  if (name == "f64" || name == "double" || name == "float64") return DataType::kFloat64;
  if (name == "f16" || name == "half" || name == "float16") return DataType::kFloat16;
  if (name == "bf16" || name == "bfloat16") return DataType::kBFloat16;
  if (name == "i32" || name == "int32") return DataType::kInt32;
  if (name == "i64" || name == "int64") return DataType::kInt64;
  if (name == "u8" || name == "uint8") return DataType::kUInt8;
  if (name == "i8" || name == "int8") return DataType::kInt8;
  if (name == "i16" || name == "int16") return DataType::kInt16;
  throw InvalidArgument("unknown dtype '" + name +
                        "'; accepted: f32 f64 f16 bf16 i32 i64 u8 i8 i16");
}

bool is_floating(DataType dtype) {
  return dtype == DataType::kFloat32 || dtype == DataType::kFloat64 ||
         dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "avg";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "prod";
    case ReduceOp::kBitAnd:
      return "band";
    case ReduceOp::kBitOr:
      return "bor";
    case ReduceOp::kAdasum:
      return "adasum";
  }
  return "?";
}

ReduceOp parse_reduce_op(const std::string& name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "avg" || name == "average" || name == "mean") return ReduceOp::kAverage;
  if (name == "min") return ReduceOp::kMin;
  if (name == "max") return ReduceOp::kMax;
  if (name == "prod" || name == "product") return ReduceOp::kProduct;
  if (name == "band") return ReduceOp::kBitAnd;
  if (name == "bor") return ReduceOp::kBitOr;
  if (name == "adasum") return ReduceOp::kAdasum;
  throw InvalidArgument("unknown reduce op '" + name +
                        "'; accepted: sum avg min max prod band bor adasum");
}

void check_op_supported(DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kAverage && !is_floating(dtype)) {
    throw InvalidArgument(std::string("average is not defined on integer dtype ") +
                          dtype_name(dtype) +
                          ": use sum and divide yourself, or a floating dtype (f32 f64 f16 bf16)");
  }
  if (op == ReduceOp::kAdasum && !is_floating(dtype)) {
    throw InvalidArgument(std::string("adasum combines floating-point tensors, not ") +
                          dtype_name(dtype) + ": use f32 f64 f16 or bf16");
  }
  if ((op == ReduceOp::kBitAnd || op == ReduceOp::kBitOr) && is_floating(dtype)) {
    throw InvalidArgument(std::string(reduce_op_name(op)) +
                          " is bitwise and not defined on floating dtype " + dtype_name(dtype) +
                          ": use an integer dtype (i32 i64 u8 i8 i16)");
  }
}

size_t checked_bytes(size_t count, DataType dtype) {
  const size_t size = dtype_size(dtype);
  if (count > std::numeric_limits<size_t>::max() / size) {
    throw InvalidArgument(detail::concat(
        "element count ", count, " of ", dtype_name(dtype), " overflows the byte size; at most ",
        std::numeric_limits<size_t>::max() / size, " elements are accepted"));
  }
  return count * size;
}

float f16_to_float(uint16_t h) {
  detail::Half v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}

uint16_t float_to_f16(float f) {
  const detail::Half v = static_cast<detail::Half>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}

float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

double load_as_double(DataType dtype, const void* base, size_t i) {
  switch (dtype) {
    case DataType::kFloat32:
      return static_cast<const float*>(base)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(base)[i];
    case DataType::kFloat16:
      return f16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DataType::kBFloat16:
      return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DataType::kInt32:
      return static_cast<const int32_t*>(base)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DataType::kUInt8:
      return static_cast<const uint8_t*>(base)[i];
    case DataType::kInt8:
      return static_cast<const int8_t*>(base)[i];
    case DataType::kInt16:
      return static_cast<const int16_t*>(base)[i];
  }
  return 0;
}

void store_from_double(DataType dtype, void* base, size_t i, double v) {
  // Integers: through int64 and then unsigned truncation, which wraps modulo 2^bits.
  const uint64_t wrapped = static_cast<uint64_t>(static_cast<int64_t>(std::llround(v)));
  switch (dtype) {
    case DataType::kFloat32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      return;
    case DataType::kFloat64:
      static_cast<double*>(base)[i] = v;
      return;
    case DataType::kFloat16:
      static_cast<uint16_t*>(base)[i] = float_to_f16(static_cast<float>(v));
      return;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(base)[i] = float_to_bf16(static_cast<float>(v));
      return;
    case DataType::kInt32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(static_cast<uint32_t>(wrapped));
      return;
    case DataType::kInt64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(wrapped);
      return;
    case DataType::kUInt8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(wrapped);
      return;
    case DataType::kInt8:
      static_cast<int8_t*>(base)[i] = static_cast<int8_t>(static_cast<uint8_t>(wrapped));
      return;
    case DataType::kInt16:
      static_cast<int16_t*>(base)[i] = static_cast<int16_t>(static_cast<uint16_t>(wrapped));
      return;
  }
}

}  // namespace tessera
