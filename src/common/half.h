// IEEE half as a C++ type, for conversions only: _Float16 (GCC 12; clang from 15 on x86),
// else clang's __fp16, a storage type with the same round-to-nearest-even conversions (the fuzz
// build uses clang 14, which links compiler-rt for them).
#pragma once

namespace tessera {
namespace detail {
#if defined(__clang__) && __clang_major__ < 15
using Half = __fp16;
#else
using Half = _Float16;
#endif
}  // namespace detail
}  // namespace tessera
