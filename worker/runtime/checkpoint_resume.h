// Resuming a rank from a checkpoint (RunJobDirective.resume,
// docs/checkpoints.md), at any world size: every rank reads every
// parameter's values by name, and its hook reads the optimizer state of
// the parameters it comes to own, by name, at the first step (resharding is
// a read).
#ifndef PSHARD_WORKER_RUNTIME_CHECKPOINT_RESUME_H_
#define PSHARD_WORKER_RUNTIME_CHECKPOINT_RESUME_H_

#include "absl/status/status.h"
#include "pshard/v1/job.pb.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/runtime/step_engine.h"

namespace pshard::worker {

// Before `engine`'s first step. Opens `resume.path` (verifying every
// shard's size and SHA-256), checks it was written at step `resume.step` by
// the same model, optimizer and seed (SpecFingerprint), loads the
// parameters into `engine` and hands the hook a loader for its owned
// state. Every error is the job's own (FAILURE_CAUSE_JOB) and names the
// checkpoint: a corrupt or truncated shard (DataLoss naming the file),
// another spec's checkpoint (FailedPrecondition), a missing or misshapen
// tensor (NotFound/InvalidArgument naming it).
absl::Status ResumeFromCheckpoint(const v1::ResumePoint& resume,
                                  const v1::JobSpec& spec, StepEngine& engine);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_CHECKPOINT_RESUME_H_
