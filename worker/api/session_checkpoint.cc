// Session's checkpoints (session.h): a program's side of its job's sharded
// checkpoints, written and read by worker/runtime's CheckpointSaver and
// ResumeFromCheckpoint, the same code as the built-in jobs'.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/catalog.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard.h"
#include "common/status_macros.h"
#include "pshard/v1/job.pb.h"
#include "worker/api/session.h"
#include "worker/runtime/checkpoint_resume.h"
#include "worker/runtime/checkpoint_saver.h"
#include "worker/runtime/result_reporter.h"

namespace pshard::worker {
namespace {

// Deadline of each ReportCheckpoint RPC.
constexpr absl::Duration kCheckpointRpcTimeout = absl::Seconds(10);

}  // namespace

absl::Status Session::SaveCheckpoint(int64_t step,
                                     std::optional<std::string> program_state) {
  RETURN_IF_ERROR(CheckPrepared());
  if (local()) {
    return absl::FailedPreconditionError(
        "checkpoints are committed by the coordinator: the local test mode "
        "(PSHARD_LOCAL_STORE) cannot save one");
  }
  if (env_.checkpoint_dir.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", env_.job_id, " has no checkpoint.dir in its spec "
        "(PSHARD_CHECKPOINT_DIR is not set): add \"checkpoint\": {\"dir\": "
        "...} to the job spec to save checkpoints"));
  }
  if (env_.checkpoint_fingerprint.empty()) {
    return absl::FailedPreconditionError(
        "PSHARD_CHECKPOINT_FINGERPRINT is not set: the agent that started "
        "this program is older than its pshard library");
  }
  if (hook_->steps_finished() < 1) {
    return absl::FailedPreconditionError(
        "no step has finished yet: a checkpoint holds the state after a step");
  }
  if (step < 1 || step <= last_saved_step_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step: must be >= 1 and after the last saved step (", last_saved_step_,
        "), got ", step));
  }
  if (program_state.has_value()) {
    RETURN_IF_ERROR(checkpoint::CheckProgramStateSize(
        static_cast<int64_t>(program_state->size())));
  }
  if (saver_ == nullptr) {
    CheckpointSaver::Options options;
    options.dir = env_.checkpoint_dir;
    options.fingerprint = env_.checkpoint_fingerprint;
    options.world_size = env_.world_size;
    options.write_timeout = env_.timeout;
    options.rpc_timeout = kCheckpointRpcTimeout;
    ASSIGN_OR_RETURN(
        saver_, CheckpointSaver::Create(
                    options,
                    ResultSource{env_.job_id, env_.epoch, env_.rank,
                                 env_.worker_id},
                    control_.get(), clock_));
  }
  // The parameters hold the step's update (overlap_param_broadcast).
  RETURN_IF_ERROR(WaitForAllParameters());
  last_saved_step_ = step;
  return saver_->Start(step, *this, std::move(program_state));
}

absl::StatusOr<int64_t> Session::LoadCheckpoint(absl::string_view path) {
  RETURN_IF_ERROR(CheckPrepared());
  if (hook_->steps_finished() > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a checkpoint loads before the first step; ",
        hook_->steps_finished(), " have finished"));
  }
  const std::string where(path.empty() ? env_.resume_from : path);
  if (where.empty()) return 0;  // a first epoch: nothing to resume from
  // A step directory as it is (its shards are verified as they are read);
  // a checkpoint root: its latest complete checkpoint.
  v1::ResumePoint resume;
  absl::StatusOr<checkpoint::Manifest> manifest = checkpoint::ReadManifest(where);
  if (manifest.ok()) {
    resume.set_path(where);
    resume.set_step(manifest->step);
  } else if (absl::IsNotFound(manifest.status())) {
    ASSIGN_OR_RETURN(checkpoint::CompleteCheckpoint latest,
                     checkpoint::ResolveCheckpoint(where));
    resume.set_path(latest.step_dir);
    resume.set_step(latest.manifest.step);
  } else {
    return manifest.status();
  }
  std::map<int, std::string> program_states;
  RETURN_IF_ERROR(ResumeFromCheckpoint(resume, env_.checkpoint_fingerprint,
                                       *this, &program_states));
  loaded_program_states_ = std::move(program_states);
  return resume.step();
}

const std::string* Session::LoadedProgramState(int rank) const {
  auto it = loaded_program_states_.find(rank);
  return it == loaded_program_states_.end() ? nullptr : &it->second;
}

absl::Status Session::UploadParameters(
    const std::vector<std::vector<float>>& values) {
  RETURN_IF_ERROR(CheckValuesToUpload(params_, values));
  for (size_t i = 0; i < values.size(); ++i) {
    // Rounded into bf16 buffers, the owners' masters from `values`.
    RETURN_IF_ERROR(hook_->SetParameter(static_cast<int>(i), values[i]));
  }
  return absl::OkStatus();
}

}  // namespace pshard::worker
