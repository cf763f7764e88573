// Internal to src/torch: libtorch scalar types <-> tessera dtypes.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

#include "common/dtype.h"

namespace tessera {
namespace detail {

// Throws InvalidArgument naming the tensor and the accepted dtypes for any other type.
DataType to_dtype(c10::ScalarType type, const std::string& tensor_name);
c10::ScalarType to_scalar_type(DataType dtype);

}  // namespace detail
}  // namespace tessera
