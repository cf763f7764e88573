// Element types and reduction operations shared by every layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera {

// New types go at the end: the engine's wire format carries the enum's value.
enum class DataType {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt32,
  kInt64,
  kUInt8,
  kInt8,
  kInt16
};
// The largest value (what a decoder of the wire format accepts).
constexpr DataType kLastDataType = DataType::kInt16;

// kBitAnd and kBitOr are bitwise, on integer dtypes only (the engine's cache vote is one).
// kAdasum: Horovod's adaptive summation, floating dtypes only, run by the engine's allreduce
// (comm::adasum_allreduce), not by comm::allreduce's algorithms.
enum class ReduceOp { kSum, kAverage, kMin, kMax, kProduct, kBitAnd, kBitOr, kAdasum };

// Bytes per element.
size_t dtype_size(DataType dtype);
// Lower-case names as on the CLI: f32 f64 f16 bf16 i32 i64 u8 i8 i16.
const char* dtype_name(DataType dtype);
// Parses a CLI name (also accepts float, double, half, bfloat16, int32, int64, uint8, int8,
// int16).
// Throws InvalidArgument listing the accepted names.
DataType parse_dtype(const std::string& name);
bool is_floating(DataType dtype);

// Lower-case names: sum avg min max prod.
const char* reduce_op_name(ReduceOp op);
ReduceOp parse_reduce_op(const std::string& name);

// Throws InvalidArgument when op is not defined for dtype (average on integer types).
void check_op_supported(DataType dtype, ReduceOp op);

// count * dtype_size(dtype), throwing InvalidArgument when that overflows size_t.
size_t checked_bytes(size_t count, DataType dtype);

// Element `index` of a buffer of `dtype`, widened to double (f16 and bf16 decoded exactly).
double load_as_double(DataType dtype, const void* base, size_t index);
// Stores `value` as element `index`: floats round to nearest, integers wrap modulo 2^bits
// (the value goes through int64 first), as C++ unsigned arithmetic does.
void store_from_double(DataType dtype, void* base, size_t index, double value);

// Scalar conversions, round to nearest even.
float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);

}  // namespace tessera
