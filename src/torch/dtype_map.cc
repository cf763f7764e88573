#include "torch/dtype_map.h"

#include "common/error.h"

namespace tessera {
namespace detail {

DataType to_dtype(c10::ScalarType type, const std::string& tensor_name) {
  switch (type) {
    case c10::ScalarType::Float:
      return DataType::kFloat32;
    case c10::ScalarType::Double:
      return DataType::kFloat64;
    case c10::ScalarType::Half:
      return DataType::kFloat16;
    case c10::ScalarType::BFloat16:
      return DataType::kBFloat16;
    case c10::ScalarType::Int:
      return DataType::kInt32;
    case c10::ScalarType::Long:
      return DataType::kInt64;
    case c10::ScalarType::Byte:
      return DataType::kUInt8;
    case c10::ScalarType::Char:
      return DataType::kInt8;
    case c10::ScalarType::Short:
      return DataType::kInt16;
    default:
      break;
  }
  throw InvalidArgument("'" + tensor_name + "': tensors of type " +
                        std::string(c10::toString(type)) +
                        " are not supported; accepted: uint8, int8, int16, int32, int64, "
                        "float16, bfloat16, float32, float64, and bool for allreduce, "
                        "allgather, broadcast and alltoall");
}

c10::ScalarType to_scalar_type(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return c10::ScalarType::Float;
    case DataType::kFloat64:
      return c10::ScalarType::Double;
    case DataType::kFloat16:
      return c10::ScalarType::Half;
    case DataType::kBFloat16:
      return c10::ScalarType::BFloat16;
    case DataType::kInt32:
      return c10::ScalarType::Int;
    case DataType::kInt64:
      return c10::ScalarType::Long;
    case DataType::kUInt8:
      return c10::ScalarType::Byte;
    case DataType::kInt8:
      return c10::ScalarType::Char;
    case DataType::kInt16:
      return c10::ScalarType::Short;
  }
  TESSERA_ASSERT(false, "unknown dtype");
  return c10::ScalarType::Float;
}

}  // namespace detail
}  // namespace tessera
