// A program's own account of why it failed, for its agent (as torchrun's
// TORCHELASTIC_ERROR_FILE): the agent names a file in PSHARD_ERROR_FILE,
// the program's pshard session writes its first collective failure there,
// and when the program exits non-zero the agent reads it. A failure caused
// by a lost peer is then reported as PEER, so the coordinator blames the
// lost worker and restarts the job, instead of taking the exit that followed
// as the program's own (JOB) failure.
//
// The file is a ReportResultRequest in protobuf's JSON mapping with only
// `cause` and `error` set; it is written atomically (a temporary file, then
// rename).
#ifndef PSHARD_WORKER_RUNTIME_PROGRAM_FAILURE_H_
#define PSHARD_WORKER_RUNTIME_PROGRAM_FAILURE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "pshard/v1/worker_control.pb.h"

namespace pshard::worker {

// <log_dir>/<job id>/rank-<rank>.error.json, beside the rank's log
// (ProgramLogPath).
std::string ProgramFailurePath(absl::string_view log_dir,
                               absl::string_view job_id, int rank);

// Writes `failure` (not OK) with its cause (FailureCauseOf) to `path`.
absl::Status WriteProgramFailure(const std::string& path,
                                 const absl::Status& failure);

struct ProgramFailure {
  v1::FailureCause cause = v1::FAILURE_CAUSE_JOB;
  std::string error;
};
// What the program wrote, if it wrote anything readable: nullopt for a
// missing, oversized (> 64 KiB) or malformed file, or an unknown cause — the
// program's exit status then stands alone.
std::optional<ProgramFailure> ReadProgramFailure(const std::string& path);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_PROGRAM_FAILURE_H_
