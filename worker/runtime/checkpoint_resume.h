// Resuming a rank from a checkpoint (RunJobDirective.resume,
// docs/checkpoints.md), at any world size: every rank reads every
// parameter's values by name, and its hook reads the optimizer state of
// the parameters it comes to own, by name, at the first step (resharding is
// a read).
#ifndef PSHARD_WORKER_RUNTIME_CHECKPOINT_RESUME_H_
#define PSHARD_WORKER_RUNTIME_CHECKPOINT_RESUME_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "pshard/v1/job.pb.h"
#include "absl/strings/string_view.h"
#include "worker/runtime/rank_model.h"

namespace pshard::worker {

// Before `model`'s first step. Opens `resume.path` (verifying every
// shard's size and SHA-256), checks it was written at step `resume.step` by
// a job with the same model, optimizer and seed (its manifest's spec
// fingerprint is `fingerprint`, checkpoint::SpecFingerprint; not checked
// when empty), loads the
// parameters into `model` and hands the hook a loader for its owned state.
// Every error is the job's own (FAILURE_CAUSE_JOB) and names the
// checkpoint: a corrupt or truncated shard (DataLoss naming the file),
// another spec's checkpoint (FailedPrecondition), a missing or misshapen
// tensor (NotFound/InvalidArgument naming it). `program_states`, when not
// null, receives the program state each rank saved with its shard, by rank
// (checkpoint::ShardReader::ProgramStates).
absl::Status ResumeFromCheckpoint(
    const v1::ResumePoint& resume, absl::string_view fingerprint,
    RankModel& model, std::map<int, std::string>* program_states = nullptr);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_CHECKPOINT_RESUME_H_
