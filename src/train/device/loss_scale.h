// Dynamic loss scaling for f16 training (pure; Micikevicius et al., "Mixed Precision Training",
// 2018). The loss is multiplied by scale() before backward so that small gradients survive f16;
// the optimizer sees them divided by it again. A step whose gradients hold an inf or a NaN is
// skipped and the scale multiplied by backoff; after growth_interval good steps in a row it is
// multiplied by growth. The caller decides "overflow" the same on every rank (a max-allreduce of
// the flag), so every rank skips the same steps and keeps the same scale.
//
// Defaults are torch.cuda.amp.GradScaler's, plus a limit: max_skips steps skipped in a row means
// the model diverged or the data is bad, and training stops naming the scale it reached.
#pragma once

#include <cstdint>

namespace tessera {
namespace train {

struct LossScaleOptions {
  double initial = 65536.0;  // 2^16
  double growth = 2.0;
  double backoff = 0.5;
  int64_t growth_interval = 2000;
  int64_t max_skips = 25;  // skipped in a row before giving up (0: never give up)
};

class LossScaler {
 public:
  // Checks the options (InvalidArgument naming the bad one).
  explicit LossScaler(LossScaleOptions options = {});
  double scale() const { return scale_; }
  // After a step's backward: whether to apply it. overflow: some gradient, on some rank, is
  // not finite. Throws InvalidArgument when this is the max_skips-th skip in a row, naming the
  // scale and what to try.
  bool update(bool overflow);
  int64_t skipped_total() const { return skipped_total_; }
  int64_t skipped_in_a_row() const { return skipped_in_a_row_; }

 private:
  LossScaleOptions options_;
  double scale_;
  int64_t good_in_a_row_ = 0;
  int64_t skipped_in_a_row_ = 0;
  int64_t skipped_total_ = 0;
};

}  // namespace train
}  // namespace tessera
