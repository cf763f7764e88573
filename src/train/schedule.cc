#include "train/schedule.h"

#include <cmath>

#include "common/error.h"

namespace tessera {
namespace train {

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "constant") return ScheduleKind::kConstant;
  if (name == "step") return ScheduleKind::kStep;
  if (name == "cosine") return ScheduleKind::kCosine;
  if (name == "poly") return ScheduleKind::kPoly;
  throw InvalidArgument("--lr-schedule '" + name +
                        "' is not known; accepted: constant, step, cosine, poly");
}

double LrSchedule::peak() const {
  return base_lr * static_cast<double>(global_batch) / static_cast<double>(base_batch);
}

double LrSchedule::at(int64_t step) const {
  const double top = peak();
  if (step < warmup_steps) {
    // From the unscaled rate (one worker's, in Goyal et al.'s terms) up to the scaled one.
    const double start = std::min(base_lr, top);
    return start + (top - start) * static_cast<double>(step) / static_cast<double>(warmup_steps);
  }
  const double t = static_cast<double>(step - warmup_steps);
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  switch (kind) {
    case ScheduleKind::kConstant:
      return top;
    case ScheduleKind::kStep: {
      double lr = top;
      for (int64_t m : milestones) {
        if (step >= m) lr *= gamma;
      }
      return lr;
    }
    case ScheduleKind::kCosine:
      return 0.5 * top * (1.0 + std::cos(M_PI * std::min(1.0, t / span)));
    case ScheduleKind::kPoly:
      return top * std::pow(std::max(0.0, 1.0 - t / span), power);
  }
  return top;
}

}  // namespace train
}  // namespace tessera
