// Job specifications: parsing from JSON, validation, defaults, and per-
// parameter hyper-parameter resolution. The one place where a JobSpec's rules
// live; the CLI, the coordinator and the workers all call it.
#ifndef PSHARD_COMMON_JOB_SPEC_H_
#define PSHARD_COMMON_JOB_SPEC_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/lr_schedule.h"
#include "pshard/v1/job_spec.pb.h"

namespace pshard {

// Limits enforced by ValidateJobSpec.
inline constexpr int kMaxWorldSize = 4096;
inline constexpr double kMaxBucketCapMb = 4096;
inline constexpr int kMaxJobNameLength = 128;
inline constexpr int kMaxLayerWidth = 65536;
inline constexpr int kMaxHiddenLayers = 64;
inline constexpr int64_t kMaxSyntheticParameters = int64_t{1} << 34;
inline constexpr int64_t kMaxSteps = 1000000000;
inline constexpr int kMaxParamGroups = 64;
inline constexpr int kMaxPatternLength = 256;
inline constexpr int kMaxPathLength = 4096;
inline constexpr int kMaxProgramArgs = 4096;
inline constexpr int64_t kMaxProgramArgvBytes = 256 * 1024;
inline constexpr int kMaxProgramEnvVars = 1024;
inline constexpr int64_t kMaxProgramEnvBytes = 256 * 1024;
inline constexpr int kMaxProgramEnvNameLength = 256;
inline constexpr double kDefaultProgramGracePeriodSeconds = 30;
inline constexpr double kMaxProgramGracePeriodSeconds = 3600;
inline constexpr int kMaxRestarts = 1000;
// JobSpec.priority's range; 0 is the default.
inline constexpr int kMinPriority = -1000;
inline constexpr int kMaxPriority = 1000;
inline constexpr int kMaxKeepLast = 1000000;
inline constexpr int kMaxGradientAccumulationSteps = 1000000;
// OptimizerSpec.norm_type's other value besides 2: the max-abs norm.
inline constexpr double kInfinityNorm = std::numeric_limits<double>::infinity();

// A program job's environment names that the worker's agent sets itself
// (docs/api.md, "Program jobs"), so a spec's program.env may not: every name
// starting with this prefix, and torchrun's names below.
inline constexpr absl::string_view kProgramEnvReservedPrefix = "PSHARD_";
inline constexpr absl::string_view kTorchrunEnvNames[] = {
    "RANK",           "WORLD_SIZE",  "LOCAL_RANK",
    "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};

// Parses the JSON form of a JobSpec (protobuf's JSON mapping; enum names are
// case-insensitive, so "gloo" and "GLOO" both work) and validates it.
// InvalidArgument names the offending field by its path: JSON syntax errors
// by line and column, unknown fields with the nearest field name, wrong
// types, enum values with the valid ones, null in a list, a missing required
// field as "required", out-of-range values (ParseStrictJson in
// job_spec_json.h, then ValidateJobSpec).
absl::StatusOr<v1::JobSpec> ParseJobSpecJson(absl::string_view json);

// Parses the JSON form of an OptimizerSpec alone (a JobSpec's `optimizer`
// field, as the C API receives it) and checks it with the same rules;
// InvalidArgument names the field with the same "optimizer." paths.
absl::StatusOr<v1::OptimizerSpec> ParseOptimizerSpecJson(absl::string_view json);

// Checks every field of `spec` against the rules documented in
// job_spec.proto. InvalidArgument names the first offending field by its
// path, e.g. "optimizer.hyper_parameters.lr: must be > 0, got -1".
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// Returns `spec` with every unset field given its documented default (backend
// AUTO, policy BALANCED, comm mode REDUCE_BROADCAST, bucket_cap_mb 25, ...).
// Call on a valid spec.
v1::JobSpec ApplyJobSpecDefaults(v1::JobSpec spec);

// Hyper-parameters of one parameter, all fields resolved (group override, then
// the optimizer's own, then PyTorch's default for the kind).
struct HyperParameters {
  double lr = 0;
  double momentum = 0;
  double dampening = 0;
  bool nesterov = false;
  double weight_decay = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double lr_decay = 0;                   // ADAGRAD
  double initial_accumulator_value = 0;  // ADAGRAD
  double alpha = 0.99;                   // RMSPROP
  bool centered = false;                 // RMSPROP
  bool amsgrad = false;                  // ADAM, ADAMW
  // The group's schedule (constant when none is set); the lr of a step is
  // ScheduledLearningRate(lr, lr_schedule, step_index), unless the program
  // sets its group's lr while it trains (StepLearningRate).
  LrSchedule lr_schedule;
  // The param group these come from: an index into optimizer.param_groups,
  // -1 for the default group.
  int group = -1;

  friend bool operator==(const HyperParameters& a, const HyperParameters& b);
};

// The parameter group index that applies to `parameter_name`: the first of
// optimizer.param_groups with a matching glob, or -1 for the default group.
int ParamGroupIndex(const v1::OptimizerSpec& optimizer,
                    absl::string_view parameter_name);

// Resolved hyper-parameters for `parameter_name` under a valid `optimizer`.
HyperParameters ResolveHyperParameters(const v1::OptimizerSpec& optimizer,
                                       absl::string_view parameter_name);

// Resolved hyper-parameters of group `group_index` of a valid `optimizer`
// (an index into param_groups, or -1 for the default group).
HyperParameters ResolveGroupHyperParameters(const v1::OptimizerSpec& optimizer,
                                            int group_index);

// `schedule` (valid, see ValidateJobSpec) with its defaults applied: kind
// CONSTANT when unspecified, PyTorch's defaults for unset factors.
LrSchedule ResolveLrSchedule(const v1::LrSchedule& schedule);

// OK when `group` names a parameter group of `optimizer`: -1 (the default
// group) or an index into optimizer.param_groups; InvalidArgument naming
// the valid ones otherwise.
absl::Status CheckParamGroupIndex(const v1::OptimizerSpec& optimizer,
                                  int group);

// Hyper-parameters a program changes while it trains, by parameter group:
// what torch's schedulers write into param_groups[i] ("lr"; OneCycleLR's
// and CyclicLR's "momentum" or "betas"), through the C API's
// pshardSetHyperParameters. Each change replaces its group's value from the
// steps issued after it on; a set lr replaces the group's lr_schedule too.
// A value type: the ZeRO hook hands each step a snapshot, so a change never
// reaches a step already under way.
class HyperParameterOverrides {
 public:
  // The fields that may change while training: those that neither decide
  // which optimizer state is kept nor only fill it at the start.
  static constexpr absl::string_view kSettableFields[] = {
      "lr", "weight_decay", "momentum", "betas", "eps", "alpha", "lr_decay"};

  // Merges `changes` into group `group`'s (-1: the default group, else an
  // index into optimizer.param_groups) from now on. `optimizer` is the
  // valid spec the session runs. InvalidArgument, naming the job spec
  // field the change would replace
  // ("optimizer.param_groups[0].hyper_parameters.momentum: ..."): no such
  // group, a field that is not settable or not its kind's, a value out of
  // the job spec's range, momentum that is not > 0 or set for a group that
  // keeps no momentum buffer (its spec momentum is 0). Nothing changes on
  // error.
  absl::Status Set(const v1::OptimizerSpec& optimizer, int group,
                   const v1::OptimizerHyperParameters& changes);

  // Group `group`'s hyper-parameters with every change set so far applied;
  // null when none was set for it.
  const HyperParameters* Get(int group) const;

 private:
  struct Changed {
    v1::OptimizerHyperParameters changes;  // every change so far, merged
    HyperParameters resolved;
  };
  std::vector<std::optional<Changed>> by_group_;  // [group + 1]
};

// `hp` (a parameter's resolved hyper-parameters) with its group's changes
// applied: the overrides' copy when the group has changes, else `hp`.
const HyperParameters& EffectiveHyperParameters(
    const HyperParameters& hp, const HyperParameterOverrides& overrides);

// The settable hyper-parameters (HyperParameterOverrides::kSettableFields)
// that `optimizer`'s kind uses, of its group `group` (which exists), with
// `overrides` applied: what a program reads back (torch's param_groups).
v1::OptimizerHyperParameters SettableHyperParameters(
    const v1::OptimizerSpec& optimizer, int group,
    const HyperParameterOverrides& overrides);

// The lr of optimizer step `step` (1-based) for parameters with `hp`: the
// one set for hp.group when there is one, else the group's schedule.
double StepLearningRate(const HyperParameters& hp, int64_t step,
                        const HyperParameterOverrides& overrides);

// The lr the default group ran optimizer step `step` (1-based) at: what
// progress reports. 0 when `step` < 1.
double DefaultGroupLearningRate(const v1::OptimizerSpec& optimizer,
                                int64_t step,
                                const HyperParameterOverrides& overrides = {});

}  // namespace pshard

#endif  // PSHARD_COMMON_JOB_SPEC_H_
