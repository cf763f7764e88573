#include "train/schedule.h"

#include <cmath>
#include <sstream>

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

void validate(const ScheduleOptions& o) {
  TESSERA_CHECK(o.lr > 0, "--lr must be > 0, got ", o.lr);
  TESSERA_CHECK(o.base_batch > 0, "--lr-base-batch must be > 0, got ", o.base_batch);
  TESSERA_CHECK(o.warmup_epochs >= 0, "--warmup-epochs must be >= 0, got ", o.warmup_epochs);
  parse_schedule(o.kind);
}

std::string describe(const ScheduleOptions& o) {
  std::ostringstream s;
  s.precision(17);
  s << "--lr: " << o.lr << "\n--lr-base-batch: " << o.base_batch
    << "\n--warmup-epochs: " << o.warmup_epochs << "\n--lr-schedule: " << o.kind
    << "\n--lr-milestones:";
  for (double m : o.milestones) s << " " << m;
  s << "\n--lr-gamma: " << o.gamma << "\n";
  return s.str();
}

LrSchedule plan_schedule(const ScheduleOptions& o, int64_t global_batch, int64_t steps_per_epoch,
                         int64_t total_steps) {
  const auto steps_of = [&](double epochs) {
    return static_cast<int64_t>(std::llround(epochs * static_cast<double>(steps_per_epoch)));
  };
  LrSchedule s;
  s.base_lr = o.lr;
  s.base_batch = o.base_batch;
  s.global_batch = global_batch;
  s.warmup_steps = steps_of(o.warmup_epochs);
  s.total_steps = total_steps;
  s.kind = parse_schedule(o.kind);
  s.gamma = o.gamma;
  for (double e : o.milestones) s.milestones.push_back(steps_of(e));
  return s;
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
