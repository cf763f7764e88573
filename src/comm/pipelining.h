// The algorithms' pipelining settings, declared here so that the cost table (selector.h) and a
// communicator's settings (settings.h) take their defaults from one place: the segment size of
// the point-to-point algorithms, the colors of multicolor, and the shared-memory staging size
// of hierarchical.
#pragma once

#include <cstddef>

#include "common/settings.h"

namespace tessera {
namespace comm {

inline constexpr IntSetting kColors{
    "TESSERA_COLORS", 4, 1, 16,
    "number of colors (concurrent trees) of the `multicolor` algorithm"};
inline constexpr BytesSetting kSegmentBytes{
    "TESSERA_SEGMENT_BYTES", size_t{256} << 10, size_t{1} << 10, size_t{1} << 30,
    "pipelining unit of the point-to-point algorithms (`ring`, `dbtree`, `multicolor`)"};
inline constexpr BytesSetting kShmBytes{
    "TESSERA_SHM_BYTES", size_t{1} << 20, size_t{4} << 10, size_t{1} << 30,
    "bytes per rank staged through node-local shared memory at a time (`hierarchical`); each "
    "rank maps twice this much"};

}  // namespace comm
}  // namespace tessera
