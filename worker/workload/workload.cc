// CreateWorkload: picks the built-in workload a JobSpec names.
#include "worker/workload/workload.h"

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/workload/accumulating_workload.h"
#include "worker/workload/mlp_workload.h"
#include "worker/workload/replay_workload.h"
#include "worker/workload/synthetic_workload.h"

namespace pshard::worker {

namespace {

absl::StatusOr<std::unique_ptr<Workload>> CreateBuiltIn(const v1::JobSpec& spec,
                                                        int rank,
                                                        int world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is not in [0, world_size ", world_size, ")"));
  }
  switch (spec.workload_case()) {
    case v1::JobSpec::kMlp: {
      ASSIGN_OR_RETURN(std::unique_ptr<MlpWorkload> w,
                       MlpWorkload::Create(spec.mlp(), spec.seed(), rank));
      return std::unique_ptr<Workload>(std::move(w));
    }
    case v1::JobSpec::kSynthetic: {
      ASSIGN_OR_RETURN(
          std::unique_ptr<SyntheticWorkload> w,
          SyntheticWorkload::Create(spec.synthetic(), spec.seed(), rank));
      return std::unique_ptr<Workload>(std::move(w));
    }
    case v1::JobSpec::kReplay: {
      ASSIGN_OR_RETURN(std::unique_ptr<ReplayWorkload> w,
                       ReplayWorkload::Create(spec.replay(), rank));
      return std::unique_ptr<Workload>(std::move(w));
    }
    case v1::JobSpec::kProgram:
      // The agent runs a program job itself (worker/runtime/program_job.h);
      // there is no built-in workload to make.
      return absl::InvalidArgumentError(
          "a program workload is run by the agent, not as a built-in one");
    case v1::JobSpec::WORKLOAD_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("job spec names no workload");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Workload>> CreateWorkload(
    const v1::JobSpec& spec, int rank, int world_size) {
  ASSIGN_OR_RETURN(std::unique_ptr<Workload> workload,
                   CreateBuiltIn(spec, rank, world_size));
  if (spec.gradient_accumulation_steps() <= 1) return workload;
  return AccumulatingWorkload::Create(std::move(workload),
                                      spec.gradient_accumulation_steps());
}

}  // namespace pshard::worker
