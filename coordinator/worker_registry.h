// The coordinator's workers: one record per worker ever registered (by
// number, and by name), with its registration, liveness (heartbeats, LOST),
// drain flag and its current rank, if any. The membership state machine is
// drawn in coordinator.h; StateOf derives the state from the record.
//
// A worker is schedulable (Idle) only when it is free: not LOST, not
// draining, holding no rank, not RELEASING (still finishing a rank the
// coordinator took back, see WorkerRec::releasing) and heard from within
// schedulable_heartbeat_age (a worker whose heartbeat is late, e.g. its
// process is stalled or its network slow, may be about to be LOST).
//
// Loss detection is lazy: DueLosses scans the records only once the earliest
// possible loss is due (a heartbeat only ever moves a worker's limit
// later). A worker loaded after a restart is unconfirmed until it is heard
// from, and is given until started + recovery_grace.
//
// What a loss or a new incarnation does to the worker's job is the
// coordinator's (it spans workers and jobs); this registry only keeps the
// records. Called under the coordinator's lock; not thread-safe itself.
// Errors:
//   InvalidArgument (ValidateRegistration): bad name, incarnation, address,
//     host, device or device kind (names the field); (List) a bad page size
//     or page token.
//   ResourceExhausted (Add): max_workers workers are registered.
//   NotFound (Resolve): neither a worker id nor a name.
//   InvalidArgument (ValidateAttachment): worker_id or incarnation missing
//     or too long.
#ifndef PSHARD_COORDINATOR_WORKER_REGISTRY_H_
#define PSHARD_COORDINATOR_WORKER_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordinator/paging.h"
#include "coordinator/scheduler.h"
#include "pshard/v1/cluster.pb.h"
#include "pshard/v1/worker_control.pb.h"

namespace pshard {
namespace coordinator {

struct WorkerRec {
  int64_t num = 0;
  // Registry fields (id, incarnation, name, address, host, device kind,
  // device, registered_time, drain_requested); the rest of WorkerInfo is
  // derived.
  v1::WorkerInfo info;
  bool lost = false;
  // Heard from (registered or heartbeated) since this coordinator started.
  bool confirmed = false;
  // Heartbeated since this coordinator started (restart recovery waits for
  // a heartbeat: only it says what the worker runs).
  bool heartbeated = false;
  absl::Time last_heartbeat;
  // The coordinator's assignment; job_num == 0 when none.
  int64_t job_num = 0;
  int64_t epoch = 0;
  int rank = -1;
  bool acknowledged = false;
  int run_job_sends = 0;
  // Consecutive heartbeats without the acknowledged job.
  int missing_reports = 0;
  // Last heartbeat reported exactly the assigned (job, epoch).
  bool reports_assignment = false;
  // AbortJob directives, delivered (and cleared) with the next heartbeat
  // reply.
  std::vector<v1::Directive> directives;
  // The rank the coordinator took back (cancel, failure, restart) while
  // the worker may still be running it: it stays RELEASING, and is not
  // scheduled, until it says it has stopped (a heartbeat without that job
  // and epoch, or a ReportResult for it) or is LOST. Also set when a
  // heartbeat reports a job and epoch the worker does not hold (e.g. after
  // a coordinator restart). Not durable: heartbeats rebuild it.
  struct Releasing {
    std::string job_id;
    int64_t epoch = 0;
    int rank = -1;  // -1 when only a heartbeat told of it
  };
  std::optional<Releasing> releasing;
  // The current Attach stream (Coordinator::AttachWorker), 0 when none;
  // only its end makes the worker LOST. Registering clears it: a stream
  // opened before belongs to a membership that has ended.
  int64_t attachment_id = 0;

  // Takes `rank` of (job_num, epoch), not yet acknowledged.
  void Assign(int64_t job_num, int64_t epoch, int rank);
  // Drops the assignment and its acknowledgement bookkeeping.
  void Release();
  // Whether the worker is finishing (job_id, epoch), released.
  bool IsReleasing(absl::string_view job_id, int64_t epoch) const {
    return releasing.has_value() && releasing->job_id == job_id &&
           releasing->epoch == epoch;
  }
  // Whether the worker holds a rank of (job_num, epoch).
  bool Holds(int64_t job_num, int64_t epoch) const {
    return this->job_num == job_num && this->epoch == epoch;
  }
};

struct WorkerRegistryOptions {
  int max_workers = 65536;
  absl::Duration worker_timeout = absl::Seconds(5);
  absl::Duration recovery_grace = absl::Seconds(10);
  // A worker heard from longer ago than this is not scheduled (its
  // heartbeat is late); Coordinator sets it to worker_timeout / 2.
  absl::Duration schedulable_heartbeat_age = absl::Seconds(2.5);
};

// A page of ListWorkers.
struct WorkerPage {
  std::vector<v1::WorkerInfo> workers;
  // Empty on the last page.
  std::string next_page_token;
};

class WorkerRegistry {
 public:
  static constexpr PageLimits kPages{500, 1000};

  // `started`: when this coordinator started (the recovery grace runs from
  // it).
  WorkerRegistry(WorkerRegistryOptions options, absl::Time started)
      : options_(options), started_(started) {}

  static absl::Status ValidateRegistration(const v1::RegisterWorkerRequest& req);
  static absl::Status ValidateAttachment(const v1::AttachRequest& req);

  // The worker named `name`, or null.
  WorkerRec* FindByName(absl::string_view name);
  const WorkerRec* FindByName(absl::string_view name) const;
  // A new worker "w-<n>" named `name`, registered at `now`.
  absl::StatusOr<WorkerRec*> Add(absl::string_view name, absl::Time now);
  // Records registration `req` (validated) of `w` at `now`: its identity,
  // confirmed and not lost, heard from now.
  void Register(WorkerRec& w, const v1::RegisterWorkerRequest& req,
                absl::Time now);
  // A new attachment of `w`, which replaces the one before; its id, unique
  // for this registry's life.
  int64_t Attach(WorkerRec& w);
  // A worker loaded from the state store: unconfirmed, heard of at `now`.
  WorkerRec& Restore(int64_t num, v1::WorkerInfo info, absl::Time now);
  // Forgets worker `num` (a registration that did not commit). Numbers are
  // not handed out again.
  void Remove(int64_t num);

  WorkerRec* Find(int64_t num);
  const WorkerRec* Find(int64_t num) const;
  // By id ("w-7") only; null when unknown.
  WorkerRec* Find(absl::string_view worker_id);
  const WorkerRec* Find(absl::string_view worker_id) const;
  // By id, else by name.
  absl::StatusOr<WorkerRec*> Resolve(absl::string_view worker);
  absl::StatusOr<const WorkerRec*> Resolve(absl::string_view worker) const;

  // What heartbeat `req` says `w` runs decides whether it is RELEASING: a
  // job and epoch it does not hold keeps (or makes) it so; anything else
  // (no job, or its own assignment) means it has stopped what it finished.
  static void NoteWhatItRuns(WorkerRec& w, const v1::HeartbeatRequest& req);

  static v1::WorkerState StateOf(const WorkerRec& w);
  // The worker as ListWorkers/GetWorker show it at `now`.
  static v1::WorkerInfo InfoOf(const WorkerRec& w, absl::Time now);

  // Whether `w` may be given a rank at `now`: confirmed, not lost, not
  // draining, holding no rank, not RELEASING, and its last heartbeat at
  // most schedulable_heartbeat_age old.
  bool Schedulable(const WorkerRec& w, absl::Time now) const;
  // The schedulable workers at `now`, in number order. With
  // `finishing_job_id`, also those RELEASING only a rank of that job (and
  // otherwise schedulable): a restart of the job may take its own old
  // members back, since they run its next epoch once they stop the last.
  std::vector<IdleWorker> Idle(absl::Time now,
                               absl::string_view finishing_job_id = {}) const;

  // Workers registered, not LOST and not draining (busy or not): the pool a
  // queued job may ever start on. O(workers).
  int64_t Available() const;

  // The workers not heard from in time at `now`, in number order, with the
  // reason each is lost; none until the earliest possible loss is due.
  struct Loss {
    WorkerRec* worker;
    std::string why;
  };
  std::vector<Loss> DueLosses(absl::Time now);

  // In number order, from after the page token (see
  // Coordinator::ListWorkers).
  absl::StatusOr<WorkerPage> List(bool include_lost, int page_size,
                                  absl::string_view page_token,
                                  absl::Time now) const;

  size_t size() const { return workers_.size(); }

  // Every worker, in number order (metrics).
  void ForEach(absl::FunctionRef<void(const WorkerRec&)> visit) const {
    for (const auto& [num, worker] : workers_) visit(*worker);
  }

 private:
  // Schedulable but for a RELEASING rank.
  bool FreeOnceReleased(const WorkerRec& w, absl::Time now) const;

  const WorkerRegistryOptions options_;
  const absl::Time started_;
  int64_t next_num_ = 0;
  int64_t last_attachment_id_ = 0;
  std::map<int64_t, std::unique_ptr<WorkerRec>> workers_;
  absl::flat_hash_map<std::string, int64_t> by_name_;
  // No worker can be lost before this time.
  absl::Time next_loss_check_ = absl::InfinitePast();
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_WORKER_REGISTRY_H_
