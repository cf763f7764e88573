#include "train/device/loss_scale.h"

#include "common/error.h"

namespace tessera {
namespace train {

LossScaler::LossScaler(LossScaleOptions options) : options_(options), scale_(options.initial) {
  TESSERA_CHECK(options.initial > 0, "loss scale: the initial scale must be positive, got ",
                options.initial);
  TESSERA_CHECK(options.growth >= 1, "loss scale: growth must be at least 1, got ", options.growth);
  TESSERA_CHECK(options.backoff > 0 && options.backoff < 1,
                "loss scale: backoff must be between 0 and 1 (exclusive), got ", options.backoff);
  TESSERA_CHECK(options.growth_interval >= 1,
                "loss scale: the growth interval must be at least 1 "
                "step, got ",
                options.growth_interval);
  TESSERA_CHECK(options.max_skips >= 0,
                "loss scale: max_skips must be 0 (never stop) or more, "
                "got ",
                options.max_skips);
}

bool LossScaler::update(bool overflow) {
  if (!overflow) {
    skipped_in_a_row_ = 0;
    if (++good_in_a_row_ == options_.growth_interval) {
      scale_ *= options_.growth;
      good_in_a_row_ = 0;
    }
    return true;
  }
  good_in_a_row_ = 0;
  ++skipped_total_;
  ++skipped_in_a_row_;
  const double was = scale_;
  scale_ *= options_.backoff;
  TESSERA_CHECK(
      options_.max_skips == 0 || skipped_in_a_row_ < options_.max_skips,
      "f16 training stopped: ", skipped_in_a_row_,
      " steps in a row had gradients that were not finite (inf or NaN) on some rank; "
      "the last ran with loss scale ",
      was,
      ". The model diverged or the data is bad: lower "
      "the learning rate, or train in bf16 (--precision bf16), which needs no loss scale");
  return false;
}

}  // namespace train
}  // namespace tessera
