// Restart recovery (see "Restart" in coordinator.h): rebuilding the records
// from what the previous coordinator left in the StateStore, and deciding,
// for each job that was active, what happens once its workers are back.
//
//   RestoreSnapshot ──▶ workers unconfirmed; STARTING|RUNNING jobs
//                       recovering, their ranks' workers attached again
//   DecideRecovery (on every heartbeat and Tick, while recovering):
//     kWait      some unfinished rank's worker has not heartbeated yet
//     kContinue  RUNNING, and every unfinished rank's worker reports the
//                job's (job, epoch)
//     kRestart   otherwise, on the same workers with a new epoch
//     kFail      one of those workers is lost or runs another job
//
//   RestoreRecords (after a failed commit, not a restart): the records the
//     failed batches held are put back as the store has them; the rest of
//     memory stays as it is (see "Commit or nothing" in locked_section.h).
//
// Pure functions over the units; the coordinator applies the decision (it
// ends jobs, releases ranks and starts epochs). Called under its lock.
#ifndef PSHARD_COORDINATOR_RECOVERY_H_
#define PSHARD_COORDINATOR_RECOVERY_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/job_table.h"
#include "coordinator/state_store.h"
#include "coordinator/worker_registry.h"

namespace pshard {
namespace coordinator {

// Fills the empty `workers` and `jobs` from `snapshot` at `now`. Returns the
// active jobs that cannot be recovered (a rank names an unknown worker),
// each with the reason to fail it; their ranks hold no worker.
std::vector<std::pair<JobRec*, std::string>> RestoreSnapshot(
    StateStore::Snapshot snapshot, absl::Time now, WorkerRegistry& workers,
    JobTable& jobs);

// What RestoreRecords leaves the coordinator to do.
struct RestoredRecords {
  // The jobs' records as memory had them, replaced or removed: the
  // coordinator ends the waits parked on them.
  std::vector<std::unique_ptr<JobRec>> replaced;
  // LOST workers that hold a rank again (the change that followed their
  // loss did not commit): the coordinator marks them lost again.
  std::vector<WorkerRec*> lost_members;
};

// Puts jobs `job_nums` and workers `worker_nums` back as `snapshot` (the
// store's last committed state) has them: records it lacks are
// removed (numbers are not reused); a job restored at the state and epoch
// memory had keeps its epoch's runtime (layout reports, rendezvous keys,
// waits, checkpoint shards); another restored active job is recovering, as
// after a restart, and waits for a heartbeat from each unfinished rank's
// worker. Workers keep their liveness; their ranks follow the restored
// jobs, and AbortJob directives for a restored active job's epoch are
// dropped.
RestoredRecords RestoreRecords(StateStore::Snapshot snapshot,
                               const std::set<int64_t>& job_nums,
                               const std::set<int64_t>& worker_nums,
                               WorkerRegistry& workers, JobTable& jobs);

enum class RecoveryAction { kWait, kContinue, kRestart, kFail };

struct RecoveryDecision {
  RecoveryAction action = RecoveryAction::kWait;
  // kRestart: the workers, by rank (finished ranks included).
  std::vector<int64_t> worker_nums;
  // kRestart: the new epoch's reason; kFail: the job's failure reason.
  std::string reason;
};

// What to do with a recovering job now.
RecoveryDecision DecideRecovery(const JobRec& job,
                                const WorkerRegistry& workers);

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_RECOVERY_H_
