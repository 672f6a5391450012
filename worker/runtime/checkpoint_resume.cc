#include "worker/runtime/checkpoint_resume.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/shard.h"
#include "common/status_macros.h"
#include "worker/runtime/result_reporter.h"

namespace pshard::worker {
namespace {

absl::Status Resume(const v1::ResumePoint& resume,
                    absl::string_view fingerprint, RankModel& model,
                    std::map<int, std::string>* program_states) {
  ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::ShardReader> opened,
                   checkpoint::ShardReader::Open(resume.path()));
  std::shared_ptr<const checkpoint::ShardReader> reader = std::move(opened);
  const checkpoint::Manifest& manifest = reader->manifest();
  if (manifest.step != resume.step()) {
    return absl::FailedPreconditionError(
        absl::StrCat(resume.path(), " holds step ", manifest.step,
                     ", not the step ", resume.step(), " to resume from"));
  }
  if (!fingerprint.empty() && manifest.spec_fingerprint != fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        resume.path(), " was written by a job with another model, optimizer "
        "or seed (spec fingerprint ", manifest.spec_fingerprint.substr(0, 12),
        "…, this job's ", fingerprint.substr(0, 12), "…)"));
  }
  std::vector<std::vector<float>> values;
  for (const ParameterInfo& param : model.parameters()) {
    ASSIGN_OR_RETURN(std::vector<float> v, reader->ReadFloats(param.name));
    values.push_back(std::move(v));
  }
  if (program_states != nullptr) {
    ASSIGN_OR_RETURN(*program_states, reader->ProgramStates());
  }
  RETURN_IF_ERROR(model.UploadParameters(values));
  const int64_t step = manifest.step;
  return model.hook().SetOptimizerStateLoader(
      [reader, step](const std::string& name,
                     const std::vector<std::string>& state_names)
          -> absl::StatusOr<ParameterOptimizerState> {
        ParameterOptimizerState state;
        state.name = name;
        state.step = step;
        for (const std::string& state_name : state_names) {
          ASSIGN_OR_RETURN(std::vector<float> v,
                           reader->ReadFloats(checkpoint::StateTensorName(
                               name, state_name)));
          state.tensors.emplace_back(state_name, std::move(v));
        }
        return state;
      });
}

}  // namespace

absl::Status ResumeFromCheckpoint(const v1::ResumePoint& resume,
                                  absl::string_view fingerprint,
                                  RankModel& model,
                                  std::map<int, std::string>* program_states) {
  absl::Status status = Resume(resume, fingerprint, model, program_states);
  if (status.ok()) return status;
  return WithFailureCause(
      absl::Status(status.code(), absl::StrCat("resuming from ", resume.path(),
                                               ": ", status.message())),
      v1::FAILURE_CAUSE_JOB);
}

}  // namespace pshard::worker
