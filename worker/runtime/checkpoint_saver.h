// CheckpointSaver: one rank's part of a job's periodic checkpoints
// (JobSpec.checkpoint, docs/checkpoints.md). At every every_steps-th step
// (never the last: its parameters are the job's output) it snapshots the
// parameters this rank owns and their optimizer state, keyed by name, and
// writes them as its shard on a background thread (AsyncCheckpointWriter);
// when the write ends it tells the coordinator (ReportCheckpoint), which
// writes the step's manifest once every rank's shard is in.
//
// A checkpoint never stops training: a failed snapshot or write (a full
// disk: ResourceExhausted naming the file) is reported as the shard's
// failure (the coordinator marks the checkpoint FAILED, with an event), and
// the job goes on; the previous complete checkpoint stays the latest.
//
// Used from the training loop's thread only.
#ifndef PSHARD_WORKER_RUNTIME_CHECKPOINT_SAVER_H_
#define PSHARD_WORKER_RUNTIME_CHECKPOINT_SAVER_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "checkpoint/async_writer.h"
#include "common/clock.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/runtime/control_plane.h"
#include "worker/runtime/result_reporter.h"
#include "worker/runtime/step_engine.h"

namespace pshard::worker {

class CheckpointSaver {
 public:
  // nullptr when `spec` asks for no periodic checkpoints (no checkpoint, or
  // every_steps 0). `spec` has its defaults applied; `world_size` is the
  // epoch's. `control` and `clock` must outlive the saver.
  static absl::StatusOr<std::unique_ptr<CheckpointSaver>> Create(
      const v1::JobSpec& spec, const ResultSource& source, int world_size,
      ControlPlane* control, absl::Duration rpc_timeout, const Clock& clock);

  // Lets a write in flight finish (without reporting it).
  ~CheckpointSaver() = default;

  // True when step `step` (1-based) is a checkpoint step.
  bool Due(int64_t step) const;

  // After step `step`'s update: reports the previous write (waiting for it,
  // up to the job's collective timeout, if it is still going), then
  // snapshots `engine`'s owned parameters and optimizer state and starts
  // writing. Failures are reported, not returned.
  void Start(int64_t step, StepEngine& engine);

  // Reports a write that has ended, without waiting for one in flight.
  void Poll();

  // Waits up to `timeout` for the write in flight, if any, and reports it.
  void Finish(absl::Duration timeout);

 private:
  CheckpointSaver(const v1::JobSpec& spec, const ResultSource& source,
                  checkpoint::CheckpointWriter writer, ControlPlane* control,
                  absl::Duration rpc_timeout, const Clock& clock);

  // Reports the write of in_flight_ with `result`, and clears in_flight_.
  void Report(const absl::StatusOr<checkpoint::ShardFileInfo>& result);

  const int64_t every_steps_;
  const int64_t last_step_;
  const absl::Duration write_timeout_;
  const ResultSource source_;
  ControlPlane* const control_;
  const absl::Duration rpc_timeout_;
  checkpoint::AsyncCheckpointWriter writer_;
  // The step being written, if any.
  std::optional<int64_t> in_flight_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_CHECKPOINT_SAVER_H_
