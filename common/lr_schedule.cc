#include "common/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace pshard {
namespace {

constexpr double kPi = 3.141592653589793;  // Python's math.pi

// LinearLR's closed form at `epoch`, as torch writes it:
// base_lr * (start + (end - start) * min(total_iters, epoch) / total_iters).
double LinearLr(double base_lr, double start, double end, int64_t total_iters,
                int64_t epoch) {
  const double done = static_cast<double>(std::min(total_iters, epoch));
  return base_lr *
         (start + (end - start) * done / static_cast<double>(total_iters));
}

}  // namespace

bool operator==(const LrSchedule& a, const LrSchedule& b) {
  return a.kind == b.kind && a.warmup_steps == b.warmup_steps &&
         a.warmup_start_factor == b.warmup_start_factor &&
         a.start_factor == b.start_factor && a.end_factor == b.end_factor &&
         a.total_iters == b.total_iters && a.t_max == b.t_max &&
         a.eta_min == b.eta_min && a.step_size == b.step_size &&
         a.gamma == b.gamma;
}

double ScheduledLearningRate(double base_lr, const LrSchedule& schedule,
                             int64_t step_index) {
  int64_t t = std::max<int64_t>(step_index, 0);
  if (t < schedule.warmup_steps) {
    return LinearLr(base_lr, schedule.warmup_start_factor, 1.0,
                    schedule.warmup_steps, t);
  }
  t -= schedule.warmup_steps;
  switch (schedule.kind) {
    case LrSchedule::Kind::kConstant:
      return base_lr;
    case LrSchedule::Kind::kLinear:
      return LinearLr(base_lr, schedule.start_factor, schedule.end_factor,
                      schedule.total_iters, t);
    case LrSchedule::Kind::kCosine:
      return schedule.eta_min +
             (base_lr - schedule.eta_min) *
                 (1 + std::cos(kPi * static_cast<double>(t) /
                               static_cast<double>(schedule.t_max))) /
                 2;
    case LrSchedule::Kind::kStep:
      return base_lr * std::pow(schedule.gamma,
                                static_cast<double>(t / schedule.step_size));
  }
  return base_lr;
}

}  // namespace pshard
