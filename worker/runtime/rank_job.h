// RankJob: what the agent runs for one rank of one job attempt, whatever the
// workload: JobRunner for the built-in ones (mlp, synthetic, replay),
// ProgramJob for a user's program. The agent starts Run() on the job's own
// thread, aborts it on the coordinator's AbortJob or at shutdown, and shows
// Snapshot() in its heartbeats and WorkerStatus.
#ifndef PSHARD_WORKER_RUNTIME_RANK_JOB_H_
#define PSHARD_WORKER_RUNTIME_RANK_JOB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "pshard/v1/worker_status.pb.h"

namespace pshard::worker {

// What the WorkerStatus service shows about the running job.
struct JobSnapshot {
  std::string job_id;
  int64_t epoch = 0;
  int rank = -1;
  int64_t step = 0;
  std::vector<v1::OwnedShard> owned_shards;
  int64_t optimizer_state_bytes = 0;
};

class RankJob {
 public:
  virtual ~RankJob() = default;

  // Runs the rank to the end and reports its result (ReportResult) to the
  // coordinator. Returns the rank's status. Call once, on the job's thread.
  virtual absl::Status Run() = 0;

  // Stops the rank as soon as possible; Run() then returns `reason`. Any
  // thread; idempotent.
  virtual void Abort(const absl::Status& reason) = 0;

  virtual const std::string& job_id() const = 0;
  virtual int64_t epoch() const = 0;
  virtual JobSnapshot Snapshot() const = 0;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_RANK_JOB_H_
