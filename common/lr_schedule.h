// Learning-rate schedules: the lr of every optimizer step as a pure function
// of the group's base lr, the schedule and the step index, so that the CPU
// and GPU optimizers, the job runner's progress and the C API agree without
// sharing any state, and a resumed bucket continues its schedule from its
// saved step count alone.
//
// The values are those of torch.optim.lr_scheduler (1.13) with one
// scheduler.step() after every optimizer.step(): step t runs at the lr the
// scheduler holds after t of its steps. PyTorch computes them by recurrence
// (each lr from the previous one); this uses the closed forms PyTorch itself
// gives (`_get_closed_form_lr`), written in the same operation order, which
// agree with the recurrence to a few ulps per step (checked against torch in
// lr_schedule_test.cc to 1e-12 relative).
#ifndef PSHARD_COMMON_LR_SCHEDULE_H_
#define PSHARD_COMMON_LR_SCHEDULE_H_

#include <cstdint>

namespace pshard {

// A resolved LrSchedule (proto/pshard/v1/job_spec.proto): every field has its
// value, defaults applied (ResolveLrSchedule in common/job_spec.h). Fields
// the kind does not use keep their defaults.
struct LrSchedule {
  enum class Kind { kConstant, kLinear, kCosine, kStep };
  Kind kind = Kind::kConstant;
  // Linear warmup over steps [0, warmup_steps): LinearLR(warmup_start_factor,
  // 1.0, total_iters=warmup_steps) under SequentialLR.
  int64_t warmup_steps = 0;
  double warmup_start_factor = 1.0 / 3;
  // kLinear: LinearLR(start_factor, end_factor, total_iters).
  double start_factor = 1.0 / 3;
  double end_factor = 1.0;
  int64_t total_iters = 5;
  // kCosine: CosineAnnealingLR(T_max=t_max, eta_min).
  int64_t t_max = 1;
  double eta_min = 0;
  // kStep: StepLR(step_size, gamma).
  int64_t step_size = 1;
  double gamma = 0.1;

  friend bool operator==(const LrSchedule& a, const LrSchedule& b);
  friend bool operator!=(const LrSchedule& a, const LrSchedule& b) {
    return !(a == b);
  }
};

// The lr of optimizer step `step_index` (0 for the first step; a bucket's
// 1-based step count minus one) for a group whose lr is `base_lr`. With
// warmup_steps W > 0, steps t < W give
//   base_lr * (warmup_start_factor + (1 - warmup_start_factor) * t / W)
// and step t >= W gives the kind's lr at step t - W (PyTorch's
// SequentialLR(milestones=[W]) restarts the second scheduler at its step 0):
//   kConstant: base_lr
//   kLinear:   base_lr * (start_factor + (end_factor - start_factor) *
//                         min(t, total_iters) / total_iters)
//   kCosine:   eta_min + (base_lr - eta_min) * (1 + cos(pi * t / t_max)) / 2
//   kStep:     base_lr * gamma^floor(t / step_size)
// `schedule` must be valid (as ValidateJobSpec checks); step_index < 0 is
// treated as 0.
double ScheduledLearningRate(double base_lr, const LrSchedule& schedule,
                             int64_t step_index);

}  // namespace pshard

#endif  // PSHARD_COMMON_LR_SCHEDULE_H_
