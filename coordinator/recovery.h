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
// Pure functions over the units; the coordinator applies the decision (it
// ends jobs, releases ranks and starts epochs). Called under its lock.
#ifndef PSHARD_COORDINATOR_RECOVERY_H_
#define PSHARD_COORDINATOR_RECOVERY_H_

#include <cstdint>
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
