// The shards of a job's checkpoints as its ranks report them, step by step,
// until a step has one shard from every rank of the epoch (its manifest can
// then be written: the commit point) or one rank could not write its shard.
// Per job and epoch: a new epoch starts empty (an epoch's shards never mix
// with another's, whose world size or owners may differ). Not durable on
// purpose: after a coordinator restart the ranks' shards of an unfinished
// step are orphans, and the step stays incomplete (no manifest: it never
// counts, docs/checkpoints.md); SettleInterruptedCheckpoints then says so
// in the job's records.
#ifndef PSHARD_COORDINATOR_CHECKPOINT_TRACKER_H_
#define PSHARD_COORDINATOR_CHECKPOINT_TRACKER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "checkpoint/manifest.h"
#include "pshard/v1/job.pb.h"
#include "pshard/v1/worker_control.pb.h"

namespace pshard {
namespace coordinator {

class CheckpointTracker {
 public:
  enum class Outcome {
    // Some ranks have not reported this step yet.
    kPending,
    // This report completed the step: manifest() has every shard.
    kComplete,
    // This report says its rank could not write (the first failure of the
    // step; later reports of a failed step are kIgnored).
    kFailed,
    // A report for a step already complete or failed, or a repeat.
    kIgnored,
  };

  // Records `report` (validated here: InvalidArgument naming the field) of
  // an epoch of `world_size` ranks whose spec fingerprint is `fingerprint`.
  // The report's rank must be in the world (the caller checked it holds
  // it). InvalidArgument: a negative step, an ok report whose file is not
  // ShardFileName(rank, world_size), a negative size, a hash that is not 64
  // lowercase hex digits, or a second ok report of the same rank and step
  // with another file.
  absl::StatusOr<Outcome> Add(const v1::ReportCheckpointRequest& report,
                              int world_size, const std::string& fingerprint);

  // The manifest of a step that Add just reported kComplete.
  const checkpoint::Manifest* manifest(int64_t step) const;

  // Forgets `step` (complete or failed, once the caller recorded it).
  void Forget(int64_t step);

  // Forgets everything (a new epoch).
  void Reset() { steps_.clear(); }

  // Steps with at least one report and no outcome yet.
  int pending_steps() const;

 private:
  struct StepShards {
    checkpoint::Manifest manifest;
    std::vector<std::optional<checkpoint::ShardFileInfo>> files;  // by rank
    int reported = 0;
    bool ended = false;
  };
  std::map<int64_t, StepShards> steps_;
};

// After a coordinator restart, the job's records still WRITING were cut off
// by it, somewhere in the commit: the manifest (the commit point) decides.
// A step directory with the record's manifest (same step and world size)
// was committed on disk before the state was: COMPLETE. Anything else never
// will be: FAILED (its ranks' reports died with the old process). Either
// way the records and the disk agree again. Returns the records it
// settled, as they are now, for the job's events.
std::vector<v1::CheckpointRecord> SettleInterruptedCheckpoints(v1::Job& job,
                                                               absl::Time now);

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_CHECKPOINT_TRACKER_H_
