// Durable coordinator state: the worker registry, jobs (with their specs,
// members, progress), every job's event log, published shard assignments and
// which ranks finished. StateStore is the interface the coordinator's group
// commit writes through; Open() gives the real one, an embedded SQLite
// database (WAL mode). Tests may put a FaultStateStore
// (coordinator/fault_state_store.h) in front of it to fail chosen writes.
//
// The coordinator gathers the writes of one state change in a Batch and
// commits it before answering the RPC that caused it. Rendezvous keys, bucket
// layout reports and heartbeat times are deliberately not stored: after a
// restart a job that was still starting is restarted with a new epoch, which
// repeats rendezvous and layout reports anyway.
//
// Schema of the SQLite store (protos stored as serialized blobs, keyed by number):
//   workers(num PRIMARY KEY, name UNIQUE, info BLOB: v1.WorkerInfo)
//   jobs(num PRIMARY KEY, job BLOB: v1.Job)
//   events(job_num, sequence, event BLOB: v1.JobEvent)
//   assignments(job_num, epoch, assignment BLOB: v1.ShardAssignment)
//   finished_ranks(job_num, epoch, rank)
//   probe(id PRIMARY KEY, n): one row, rewritten by Probe
#ifndef PSHARD_COORDINATOR_STATE_STORE_H_
#define PSHARD_COORDINATOR_STATE_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/sqlite.h"
#include "pshard/v1/cluster.pb.h"
#include "pshard/v1/job.pb.h"
#include "pshard/v1/shard.pb.h"

namespace pshard {
namespace coordinator {

class StateStore {
 public:
  virtual ~StateStore() = default;

  // Everything stored, as loaded at start-up.
  struct Snapshot {
    // Ordered by number.
    std::map<int64_t, v1::WorkerInfo> workers;
    std::map<int64_t, v1::Job> jobs;
    std::map<int64_t, std::vector<v1::JobEvent>> events;
    // The latest assignment of each job.
    std::map<int64_t, v1::ShardAssignment> assignments;
    // Ranks that reported success, per job, at the job's current epoch.
    std::map<int64_t, std::set<int>> finished_ranks;
  };

  // Writes that commit together.
  struct Batch {
    std::vector<std::pair<int64_t, v1::WorkerInfo>> workers;
    std::vector<std::pair<int64_t, v1::Job>> jobs;
    std::vector<std::pair<int64_t, v1::JobEvent>> events;
    std::vector<std::pair<int64_t, v1::ShardAssignment>> assignments;
    struct FinishedRank {
      int64_t job_num;
      int64_t epoch;
      int rank;
    };
    std::vector<FinishedRank> finished_ranks;
    bool empty() const {
      return workers.empty() && jobs.empty() && events.empty() &&
             assignments.empty() && finished_ranks.empty();
    }
  };

  // The SQLite store: opens or creates the database at `path` (":memory:"
  // for tests without a file), owned by this process alone (SqliteDatabase),
  // and creates the tables if needed.
  //
  // Errors: FailedPrecondition if another coordinator holds the file (its
  // pid named); Unavailable if the file cannot be opened or is not a pshard
  // state database; Internal on SQLite errors.
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(
      const std::string& path, const SqliteOptions& options = {});

  // Everything stored: once at start-up, and again (never concurrently
  // with Commit) to restore the coordinator's memory after a failed commit.
  // Errors: DataLoss if a stored record does not parse; Internal on storage
  // errors.
  virtual absl::StatusOr<Snapshot> Load() = 0;

  // Commits every write of `batch` at once (all or nothing). Not called
  // concurrently (the coordinator serialises its writes).
  // Errors: Internal on storage errors (disk full, I/O error).
  virtual absl::Status Commit(const Batch& batch) = 0;

  // Commits a transaction that changes no state (the probe row): whether
  // the store can commit now, for health checks while commits fail. Not
  // called concurrently with Commit.
  // Errors: as Commit.
  virtual absl::Status Probe() = 0;
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_STATE_STORE_H_
