// Learning-rate schedules (pure). The linear scaling rule and gradual warm-up follow Goyal et
// al. (2017): the rate given for a reference global batch is scaled by global batch /
// reference batch; during warm-up it rises linearly from the unscaled rate to the scaled one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {
namespace train {

enum class ScheduleKind { kConstant, kStep, kCosine, kPoly };
// "constant", "step", "cosine", "poly"; throws InvalidArgument listing them.
ScheduleKind parse_schedule(const std::string& name);

// The schedule as a user gives it (--lr, --lr-base-batch, --warmup-epochs, --lr-schedule,
// --lr-milestones, --lr-gamma): in epochs, before the run knows its batch and epoch length.
struct ScheduleOptions {
  double lr = 0.1;           // for a global batch of base_batch (linear scaling rule)
  int64_t base_batch = 256;  // Goyal et al.'s reference
  double warmup_epochs = 0;  // gradual warm-up
  std::string kind = "cosine";
  std::vector<double> milestones;  // step schedule: epochs where lr *= gamma
  double gamma = 0.1;
};

// Throws InvalidArgument naming the flag that is out of range or not known.
void validate(const ScheduleOptions& o);
// "--lr: 0.1" lines, one per option (for the options every rank must share).
std::string describe(const ScheduleOptions& o);

struct LrSchedule {
  double base_lr = 0.1;        // for a global batch of base_batch
  int64_t base_batch = 256;    // Goyal et al.'s reference
  int64_t global_batch = 256;  // ranks x per-rank batch
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  ScheduleKind kind = ScheduleKind::kConstant;
  std::vector<int64_t> milestones;  // step: multiply by gamma at each of these steps
  double gamma = 0.1;
  double power = 0.9;  // poly: (1 - t / T) ^ power (DeepLab)

  // The scaled peak rate: base_lr * global_batch / base_batch.
  double peak() const;
  // The rate for `step` (0-based).
  double at(int64_t step) const;
};

// The run's schedule in steps: epochs rounded to the nearest step of `steps_per_epoch`.
LrSchedule plan_schedule(const ScheduleOptions& o, int64_t global_batch, int64_t steps_per_epoch,
                         int64_t total_steps);

}  // namespace train
}  // namespace tessera
