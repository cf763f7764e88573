#include "train/input/input_options.h"

#include <sstream>

#include "common/error.h"

namespace tessera {
namespace train {

void validate(const InputOptions& o) {
  TESSERA_CHECK(o.batch > 0, "--batch-size must be > 0, got ", o.batch);
  TESSERA_CHECK(o.image_size >= 16, "--image-size must be >= 16, got ", o.image_size);
  TESSERA_CHECK(o.workers >= 1, "--workers must be >= 1, got ", o.workers);
  TESSERA_CHECK(o.prefetch >= 1, "--prefetch must be >= 1, got ", o.prefetch);
  TESSERA_CHECK(o.max_corrupt >= 0 && o.max_corrupt < 1, "--max-corrupt must be in [0, 1), got ",
                o.max_corrupt);
  TESSERA_CHECK(o.min_scale > 0 && o.min_scale <= o.max_scale,
                "--scale-range must be two factors 0 < MIN <= MAX, got ", o.min_scale, " ",
                o.max_scale);
}

std::string describe(const InputOptions& o) {
  std::ostringstream s;
  s.precision(17);
  s << "--data: " << o.data << "\n--format: " << o.format << "\n--image-size: " << o.image_size
    << "\n--train-size: " << o.train_size << "\n--val-size: " << o.val_size
    << "\n--batch-size: " << o.batch << "\n--keep-decoded: " << o.keep_decoded
    << "\n--global-shuffle: " << o.global_shuffle << "\n--max-corrupt: " << o.max_corrupt
    << "\n--scale-range: " << o.min_scale << " " << o.max_scale << "\n";
  return s.str();
}

}  // namespace train
}  // namespace tessera
