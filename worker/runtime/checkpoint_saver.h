// CheckpointSaver: one rank's part of a job's checkpoints (JobSpec.checkpoint,
// docs/checkpoints.md). At a checkpoint step it snapshots the parameters
// this rank owns and their optimizer state, keyed by name, and writes them
// as its shard on a background thread (AsyncCheckpointWriter); when the
// write ends it tells the coordinator (ReportCheckpoint), which writes the
// step's manifest once every rank's shard is in. A built-in job saves at
// every every_steps-th step (ForJob, Due); a program saves when it asks
// (pshardSaveCheckpoint, through its Session).
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
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "checkpoint/async_writer.h"
#include "common/clock.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/runtime/control_plane.h"
#include "worker/runtime/rank_model.h"
#include "worker/runtime/result_reporter.h"

namespace pshard::worker {

class CheckpointSaver {
 public:
  struct Options {
    // JobSpec.checkpoint.dir: the step directories' root.
    std::string dir;
    // checkpoint::SpecFingerprint of the job's spec.
    std::string fingerprint;
    // The epoch's.
    int world_size = 1;
    // How long a checkpoint step waits for the previous write.
    absl::Duration write_timeout = absl::Seconds(60);
    // Every RPC's.
    absl::Duration rpc_timeout = absl::Seconds(10);
  };
  // `control` and `clock` must outlive the saver.
  static absl::StatusOr<std::unique_ptr<CheckpointSaver>> Create(
      const Options& options, const ResultSource& source,
      ControlPlane* control, const Clock& clock);

  // A built-in job's saver: nullptr when `spec` asks for no periodic
  // checkpoints (no checkpoint, or every_steps 0). `spec` has its defaults
  // applied; `world_size` is the epoch's.
  static absl::StatusOr<std::unique_ptr<CheckpointSaver>> ForJob(
      const v1::JobSpec& spec, const ResultSource& source, int world_size,
      ControlPlane* control, absl::Duration rpc_timeout, const Clock& clock);

  // Lets a write in flight finish (without reporting it).
  ~CheckpointSaver() = default;

  // True when step `step` (1-based) is a periodic checkpoint step of
  // `spec` (never the last: its parameters are the job's output).
  static bool Due(const v1::JobSpec& spec, int64_t step);

  // After step `step`'s update (the model's first step has run): reports
  // the previous write (waiting for it, up to write_timeout, if it is still
  // going), then snapshots `model`'s owned parameters and optimizer state
  // and starts writing, with `program_state` (a program's own, stored in
  // this rank's shard: checkpoint::kMetaProgramState) when set. Failures
  // are reported to the coordinator and returned (a built-in job goes on
  // regardless).
  absl::Status Start(int64_t step, RankModel& model,
                     std::optional<std::string> program_state = std::nullopt);

  // Reports a write that has ended, without waiting for one in flight, and
  // sends again the reports the coordinator could not take yet (at most
  // once per kRetryPause).
  void Poll();
  static constexpr absl::Duration kRetryPause = absl::Seconds(1);

  // Waits up to `timeout` for the write in flight, if any, and reports it;
  // within the same `timeout`, tries again the reports the coordinator
  // could not take yet (a restarting coordinator), then gives up on them.
  void Finish(absl::Duration timeout);

 private:
  CheckpointSaver(const Options& options, const ResultSource& source,
                  checkpoint::CheckpointWriter writer, ControlPlane* control,
                  const Clock& clock);

  // The snapshot: what this rank owns, copied once into the writer.
  absl::Status Snapshot(int64_t step, RankModel& model,
                        std::optional<std::string> program_state);

  // Reports the write of in_flight_ with `result`, and clears in_flight_.
  void Report(const absl::StatusOr<checkpoint::ShardFileInfo>& result);
  // Sends the unsent reports, oldest first, until one finds the coordinator
  // unreachable (it stays, with those after it, for the next try). Within
  // kRetryPause of that, nothing is tried (the training loop calls this at
  // every step: an unreachable coordinator must not stall it).
  void SendReports();

  const absl::Duration write_timeout_;
  const ResultSource source_;
  ControlPlane* const control_;
  const absl::Duration rpc_timeout_;
  const Clock& clock_;
  checkpoint::AsyncCheckpointWriter writer_;
  // The step being written, if any.
  std::optional<int64_t> in_flight_;
  // Reports the coordinator could not take yet (restarting: its clients'
  // channels fail fast until they reconnect). Without them a shard's
  // checkpoint would never complete. Sent again at the next Start, Poll
  // and Finish, in order; at most kMaxUnsentReports (the oldest go first).
  static constexpr size_t kMaxUnsentReports = 1024;
  std::deque<v1::ReportCheckpointRequest> unsent_;
  bool said_unsent_ = false;  // logged once per outage
  absl::Time next_try_ = absl::InfinitePast();
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_CHECKPOINT_SAVER_H_
