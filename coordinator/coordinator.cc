#include "coordinator/coordinator.h"

#include <algorithm>
#include <deque>
#include <iterator>
#include <thread>
#include <utility>
#include <type_traits>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/job_spec.h"
#include "common/job_state.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "shard/layout_fingerprint.h"
#include "coordinator/event_log.h"
#include "coordinator/layout_barrier.h"
#include "coordinator/scheduler.h"

namespace pshard {
namespace coordinator {
namespace {

constexpr char kWorkerPrefix[] = "w-";
constexpr char kJobPrefix[] = "job-";

std::optional<int64_t> ParseId(absl::string_view id, absl::string_view prefix) {
  if (!absl::ConsumePrefix(&id, prefix) || id.empty() || id.size() > 18) {
    return std::nullopt;
  }
  // Canonical decimal only ("w-01" and "w-+1" are not "w-1").
  if (id[0] == '0') return std::nullopt;
  int64_t n = 0;
  for (char c : id) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

std::string WorkerId(int64_t num) { return absl::StrCat(kWorkerPrefix, num); }
std::string JobId(int64_t num) { return absl::StrCat(kJobPrefix, num); }

bool IsActive(v1::JobState s) { return s == v1::STARTING || s == v1::RUNNING; }

// Printable, bounded text for messages that echo client input.
std::string Clip(absl::string_view s, size_t max = 1024) {
  std::string out(s.substr(0, max));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') c = ' ';
  }
  return out;
}

bool ValidWorkerName(absl::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                    c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

// ---- Internal records ----

struct Coordinator::WorkerRec {
  int64_t num = 0;
  // Registry fields (id, incarnation, name, address, host, device kind,
  // device, registered_time); the rest of WorkerInfo is derived.
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
  // AbortJob / Drain, delivered (and cleared) with the next heartbeat reply.
  std::vector<v1::Directive> directives;
};

struct Coordinator::RankRec {
  int64_t worker_num = 0;
  // Reported a result (ok or not) at this epoch; the worker is released.
  bool finished = false;
};

struct Coordinator::JobRec {
  int64_t num = 0;
  // The durable view: spec, state, reason, times, progress, members, epoch.
  v1::Job job;
  EventLog log;
  // Per rank of the current epoch (empty while QUEUED).
  std::vector<RankRec> ranks;
  // Ranks with finished == true.
  int finished_ranks = 0;
  LayoutBarrier layout;
  // The latest published assignment (any epoch), and its OwnersView.
  AssignmentPtr assignment;
  AssignmentPtr assignment_owners;
  RendezvousStore kv;
  std::vector<WaitId> assignment_waiters;
  // The spec of the current epoch's RunJob, shared by every rank's
  // directive (the server serializes it once per epoch).
  std::shared_ptr<const v1::JobSpec> run_job_spec;
  bool recovering = false;
};

// Writes gathered during one locked section, sealed by its epilogue
// (Locked::Commit).
struct Coordinator::Pending {
  std::set<int64_t> jobs;
  std::set<int64_t> workers;
  std::vector<std::pair<int64_t, v1::JobEvent>> events;
  std::vector<std::pair<int64_t, v1::ShardAssignment>> assignments;
  std::vector<StateStore::Batch::FinishedRank> finished_ranks;
};

// Runs batches of callbacks on its own thread, in order. The destructor runs
// what is queued, then joins.
class Coordinator::Notifier {
 public:
  Notifier() : thread_([this] { Loop(); }) {}
  ~Notifier() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  void Post(std::vector<std::function<void()>> fns) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(fns));
    ++posted_;
  }
  bool WaitIdle(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        absl::Condition(
            +[](Notifier* n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(n->mu_) {
              return n->done_ == n->posted_;
            },
            this),
        timeout);
  }

 private:
  void Loop() {
    for (;;) {
      std::vector<std::function<void()>> fns;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](Notifier* n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(n->mu_) {
              return n->stop_ || !n->queue_.empty();
            },
            this));
        if (queue_.empty()) return;  // stop_ and nothing left
        fns = std::move(queue_.front());
        queue_.pop_front();
      }
      for (auto& fn : fns) fn();
      absl::MutexLock lock(&mu_);
      ++done_;
    }
  }

  absl::Mutex mu_;
  std::deque<std::vector<std::function<void()>>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t posted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

// One locked section: holds mu_ from construction to its epilogue, Commit()
// (or CommitInBackground(), or the destructor when the section changed
// nothing durable). The epilogue seals the section's writes, releases mu_,
// waits for the write (GroupCommit::Await) and then runs the callbacks the
// section deferred (many of them: on the notifier thread). A reply is built
// under the lock, before the epilogue, and returned after it.
class ABSL_SCOPED_LOCKABLE Coordinator::Locked {
 public:
  explicit Locked(const Coordinator* c) ABSL_EXCLUSIVE_LOCK_FUNCTION(c->mu_)
      : c_(const_cast<Coordinator*>(c)) {
    c_->mu_.Lock();
  }
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;
  ~Locked() ABSL_UNLOCK_FUNCTION() {
    if (held_) RunDeferred(Unlock());
  }

  // The epilogue: the outcome of this section's writes (OK when it had
  // none; see CommitWait).
  absl::Status Commit(CommitWait wait = CommitWait::kAllSealed)
      ABSL_UNLOCK_FUNCTION() {
    const uint64_t mine = c_->Seal();
    if (mine == 0 && wait == CommitWait::kOwnBatch) {
      RunDeferred(Unlock());
      return absl::OkStatus();
    }
    // Wait for every batch sealed so far, ours or not: no reply may rest on
    // state that is not durable yet.
    const uint64_t ticket = c_->commit_.LastSealed();
    std::vector<std::function<void()>> fns = Unlock();
    const absl::Status status = c_->commit_.Await(ticket);
    RunDeferred(std::move(fns));
    return mine == 0 ? absl::OkStatus() : status;
  }

  // The epilogue without waiting: `done` gets the outcome of this section's
  // writes; it and the callbacks this section deferred run after the write,
  // on the notifier thread (inline when everything was written already).
  void CommitInBackground(std::function<void(absl::Status)> done)
      ABSL_UNLOCK_FUNCTION() {
    const uint64_t mine = c_->Seal();
    const uint64_t ticket = c_->commit_.LastSealed();
    if (c_->commit_.Written(ticket)) {
      c_->Defer([done = std::move(done)] { done(absl::OkStatus()); });
      RunDeferred(Unlock());
      return;
    }
    std::vector<std::function<void()>> fns = Unlock();
    Coordinator* c = c_;
    c_->notifier_->Post({[c, ticket, mine, fns = std::move(fns),
                          done = std::move(done)] {
      const absl::Status status = c->commit_.Await(ticket);
      for (const auto& fn : fns) fn();
      done(mine == 0 ? absl::OkStatus() : status);
    }});
  }

 private:
  // Releases mu_; the callbacks this section deferred.
  std::vector<std::function<void()>> Unlock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    std::vector<std::function<void()>> fns = std::move(c_->deferred_);
    c_->deferred_.clear();
    held_ = false;
    c_->mu_.Unlock();
    return fns;
  }
  void RunDeferred(std::vector<std::function<void()>> fns) {
    c_->RunDeferred(std::move(fns));
  }

  Coordinator* const c_;
  bool held_ = true;
};

// ---- Construction and loading ----

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    CoordinatorOptions options, const Clock* clock,
    std::unique_ptr<StateStore> store) {
  std::unique_ptr<Coordinator> c(
      new Coordinator(std::move(options), clock, std::move(store)));
  RETURN_IF_ERROR(c->Load());
  return c;
}

Coordinator::Coordinator(CoordinatorOptions options, const Clock* clock,
                         std::unique_ptr<StateStore> store)
    : options_(std::move(options)),
      kv_limits_{options_.max_kv_key_bytes, options_.max_kv_value_bytes,
                 options_.max_kv_keys_per_job, options_.max_kv_bytes_per_job,
                 options_.max_kv_bytes_total},
      clock_(clock),
      store_(std::move(store)),
      started_(clock->Now()),
      waits_(options_.max_waiters),
      pending_(std::make_unique<Pending>()),
      commit_(store_.get()),
      notifier_(std::make_unique<Notifier>()) {}

bool Coordinator::WaitForNotifier(absl::Duration timeout) {
  return notifier_->WaitIdle(timeout);
}

bool Coordinator::WaitForPendingWaits(int count,
                                      absl::Duration timeout) const {
  struct Args {
    const Coordinator* c;
    size_t count;
  } args{this, static_cast<size_t>(count)};
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](Args* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return a->c->waits_.size() == a->count;
          },
          &args),
      timeout);
}

Coordinator::~Coordinator() {
  // Fail pending waits so that no caller waits for a callback that cannot
  // come any more.
  std::vector<Wait> waits;
  {
    absl::MutexLock lock(&mu_);
    waits = waits_.TakeAll();
  }
  notifier_.reset();  // runs what it holds, then stops
  const absl::Status s = absl::UnavailableError("coordinator shutting down");
  for (Wait& wait : waits) {
    std::visit(
        [&s](auto& w) {
          if (w.done) w.done(s);
        },
        wait);
  }
}

absl::Status Coordinator::Load() {
  ASSIGN_OR_RETURN(StateStore::Snapshot snap, store_->Load());
  Locked lock(this);
  const absl::Time now = clock_->Now();
  for (auto& [num, info] : snap.workers) {
    auto w = std::make_unique<WorkerRec>();
    w->num = num;
    w->info = std::move(info);
    w->last_heartbeat = now;
    worker_by_name_[w->info.name()] = num;
    next_worker_ = std::max(next_worker_, num);
    workers_[num] = std::move(w);
  }
  for (auto& [num, job] : snap.jobs) {
    auto j = std::make_unique<JobRec>();
    j->num = num;
    j->job = std::move(job);
    j->log.Restore(std::move(snap.events[num]));
    auto a = snap.assignments.find(num);
    if (a != snap.assignments.end()) {
      j->assignment =
          std::make_shared<const v1::ShardAssignment>(std::move(a->second));
      j->assignment_owners =
          std::make_shared<const v1::ShardAssignment>(shard::OwnersView(*j->assignment));
    }
    next_job_ = std::max(next_job_, num);
    const v1::JobState state = j->job.state();
    if (state == v1::QUEUED) queued_.insert(num);
    if (IsActive(state)) {
      active_.insert(num);
      j->recovering = true;
      const std::set<int>& finished = snap.finished_ranks[num];
      std::string broken;
      for (const v1::JobMember& m : j->job.members()) {
        RankRec r;
        std::optional<int64_t> wnum = ParseId(m.worker_id(), kWorkerPrefix);
        if (!wnum || workers_.count(*wnum) == 0) {
          broken = absl::StrCat("rank ", m.rank(), " names unknown worker ",
                                Clip(m.worker_id(), 64));
        } else {
          r.worker_num = *wnum;
        }
        r.finished = finished.count(m.rank()) > 0;
        j->finished_ranks += r.finished ? 1 : 0;
        j->ranks.push_back(r);
      }
      j->layout.Reset(static_cast<int>(j->ranks.size()),
                      /*all_reported=*/state == v1::RUNNING);
      jobs_[num] = std::move(j);
      JobRec& jr = *jobs_[num];
      if (!broken.empty()) {
        EndJob(jr, v1::FAILED,
               absl::StrCat("state database inconsistent after restart: ",
                            broken));
        continue;
      }
      for (size_t r = 0; r < jr.ranks.size(); ++r) {
        if (jr.ranks[r].finished) continue;
        WorkerRec& w = *workers_[jr.ranks[r].worker_num];
        w.job_num = num;
        w.epoch = jr.job.epoch();
        w.rank = static_cast<int>(r);
        w.acknowledged = true;
      }
      continue;
    }
    jobs_[num] = std::move(j);
  }
  return lock.Commit();
}

// ---- Helpers ----

void Coordinator::Defer(std::function<void()> fn) {
  deferred_.push_back(std::move(fn));
}

void Coordinator::RunDeferred(std::vector<std::function<void()>> fns) {
  if (static_cast<int>(fns.size()) > options_.max_inline_callbacks &&
      notifier_ != nullptr) {
    notifier_->Post(std::move(fns));
    return;
  }
  for (auto& fn : fns) fn();
}

absl::Time Coordinator::CapDeadline(absl::Time deadline) const {
  return std::min(deadline, clock_->Now() + options_.max_wait);
}

Coordinator::WaitId Coordinator::Park(Wait wait, absl::Time deadline) {
  return waits_.Park(std::move(wait), CapDeadline(deadline));
}

Coordinator::WorkerRec* Coordinator::FindWorker(absl::string_view worker_id) {
  std::optional<int64_t> num = ParseId(worker_id, kWorkerPrefix);
  if (!num) return nullptr;
  auto it = workers_.find(*num);
  return it == workers_.end() ? nullptr : it->second.get();
}

Coordinator::JobRec* Coordinator::FindJob(absl::string_view job_id) {
  std::optional<int64_t> num = ParseId(job_id, kJobPrefix);
  if (!num) return nullptr;
  auto it = jobs_.find(*num);
  return it == jobs_.end() ? nullptr : it->second.get();
}

const Coordinator::JobRec* Coordinator::FindJob(
    absl::string_view job_id) const {
  std::optional<int64_t> num = ParseId(job_id, kJobPrefix);
  if (!num) return nullptr;
  auto it = jobs_.find(*num);
  return it == jobs_.end() ? nullptr : it->second.get();
}

absl::StatusOr<Coordinator::JobRec*> Coordinator::ActiveJobAt(
    absl::string_view job_id, int64_t epoch) {
  JobRec* j = FindJob(job_id);
  if (j == nullptr) {
    return absl::NotFoundError(absl::StrCat("no job ", Clip(job_id, 64)));
  }
  if (!IsActive(j->job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat(j->job.id(), " is not active (",
                     v1::JobState_Name(j->job.state()), ")"));
  }
  if (epoch != j->job.epoch()) {
    return absl::FailedPreconditionError(absl::StrCat(
        j->job.id(), ": epoch ", epoch, " is ",
        epoch < j->job.epoch() ? "stale" : "unknown", "; current epoch is ",
        j->job.epoch()));
  }
  return j;
}

absl::Status Coordinator::CheckRank(const JobRec& job, int rank,
                                    absl::string_view worker_id) const {
  if (rank < 0 || rank >= static_cast<int>(job.ranks.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank: ", rank, " is out of range for ", job.job.id(),
                     " (world size ", job.ranks.size(), ")"));
  }
  const std::string& holder = job.job.members(rank).worker_id();
  if (worker_id != holder) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_id: rank ", rank, " of ", job.job.id(),
                     " is held by ", holder, ", not ", Clip(worker_id, 64)));
  }
  return absl::OkStatus();
}

std::string Coordinator::Who(const JobRec& job, int rank) const {
  return absl::StrCat("rank ", rank, " (worker ",
                      job.job.members(rank).worker_id(), ")");
}

v1::WorkerState Coordinator::StateOf(const WorkerRec& w) const {
  if (w.lost) return v1::LOST;
  if (w.info.drain_requested()) return v1::DRAINING;
  if (w.job_num != 0) return v1::BUSY;
  return v1::IDLE;
}

v1::WorkerInfo Coordinator::InfoOf(const WorkerRec& w) const {
  v1::WorkerInfo info = w.info;
  info.set_state(StateOf(w));
  if (w.job_num != 0) {
    info.set_job_id(JobId(w.job_num));
    info.set_rank(w.rank);
  } else {
    info.set_rank(-1);
  }
  *info.mutable_heartbeat_age() =
      ToProto(std::max(absl::ZeroDuration(), clock_->Now() - w.last_heartbeat));
  return info;
}

void Coordinator::PersistJob(const JobRec& job) {
  pending_->jobs.insert(job.num);
}

void Coordinator::PersistWorker(const WorkerRec& w) {
  pending_->workers.insert(w.num);
}

uint64_t Coordinator::Seal() {
  if (pending_->jobs.empty() && pending_->workers.empty() &&
      pending_->events.empty() && pending_->assignments.empty() &&
      pending_->finished_ranks.empty()) {
    return 0;
  }
  StateStore::Batch batch;
  for (int64_t num : pending_->jobs) {
    auto it = jobs_.find(num);
    if (it != jobs_.end()) batch.jobs.emplace_back(num, it->second->job);
  }
  for (int64_t num : pending_->workers) {
    auto it = workers_.find(num);
    if (it != workers_.end()) batch.workers.emplace_back(num, it->second->info);
  }
  batch.events = std::move(pending_->events);
  batch.assignments = std::move(pending_->assignments);
  batch.finished_ranks = std::move(pending_->finished_ranks);
  pending_ = std::make_unique<Pending>();
  return commit_.Seal(std::move(batch));
}

void Coordinator::AppendEvent(JobRec& job, v1::JobEvent event) {
  std::vector<WaitId> woken = job.log.Append(std::move(event), clock_->Now());
  pending_->events.emplace_back(job.num, job.log.last());
  WakeEventWaiters(woken);
}

void Coordinator::Transition(JobRec& job, v1::JobState to,
                             std::string reason) {
  const v1::JobState from = job.job.state();
  const absl::Time now = clock_->Now();
  job.job.set_state(to);
  job.job.set_reason(reason);
  if (from == v1::QUEUED && to != v1::QUEUED) {
    *job.job.mutable_start_time() = ToProto(now);
  }
  if (IsTerminal(to)) *job.job.mutable_end_time() = ToProto(now);
  v1::JobEvent event;
  auto* change = event.mutable_state_change();
  change->set_from(from);
  change->set_to(to);
  change->set_reason(std::move(reason));
  AppendEvent(job, std::move(event));
  PersistJob(job);
}

void Coordinator::WakeEventWaiters(const std::vector<WaitId>& ids) {
  for (WaitId id : ids) {
    std::optional<EventsWait> w = waits_.Take<EventsWait>(id);
    if (!w) continue;
    Defer([done = std::move(w->done)] { done(absl::OkStatus()); });
  }
}

void Coordinator::FailJobWaiters(JobRec& job, const absl::Status& status) {
  // Ends the waits of kind W in `ids` (those not already gone) with
  // `status`.
  auto fail = [&](auto kind, std::vector<WaitId>& ids) {
    using W = decltype(kind);
    for (WaitId id : ids) {
      std::optional<W> w = waits_.Take<W>(id);
      if (!w) continue;
      Defer([done = std::move(w->done), status] { done(status); });
    }
    ids.clear();
  };
  // The rendezvous store goes with its waits: a new epoch starts empty.
  std::vector<WaitId> kv_waits = job.kv.Clear(kv_bytes_total_);
  fail(KvWait{}, kv_waits);
  fail(AssignmentWait{}, job.assignment_waiters);
  std::vector<WaitId> layout_waits = job.layout.TakeWaiters();
  fail(LayoutWait{}, layout_waits);
}

void Coordinator::ReleaseRank(JobRec& job, int rank, bool send_abort,
                              absl::string_view reason) {
  RankRec& r = job.ranks[rank];
  auto it = workers_.find(r.worker_num);
  if (it == workers_.end()) return;
  WorkerRec& w = *it->second;
  if (w.job_num != job.num || w.epoch != job.job.epoch()) return;
  w.job_num = 0;
  w.epoch = 0;
  w.rank = -1;
  w.acknowledged = false;
  w.run_job_sends = 0;
  w.missing_reports = 0;
  w.reports_assignment = false;
  if (send_abort && !w.lost) {
    v1::Directive d;
    auto* abort = d.mutable_abort_job();
    abort->set_job_id(job.job.id());
    abort->set_epoch(job.job.epoch());
    abort->set_reason(std::string(reason));
    w.directives.push_back(std::move(d));
  }
}

void Coordinator::EndJob(JobRec& job, v1::JobState state, std::string reason) {
  if (IsTerminal(job.job.state())) return;
  queued_.erase(job.num);
  active_.erase(job.num);
  for (int r = 0; r < static_cast<int>(job.ranks.size()); ++r) {
    if (!job.ranks[r].finished) {
      ReleaseRank(job, r, state != v1::SUCCEEDED,
                  absl::StrCat(v1::JobState_Name(state), ": ", reason));
    }
  }
  job.recovering = false;
  if (job.log.progress_dirty()) FlushProgress(job);
  Transition(job, state, reason);
  FailJobWaiters(job, absl::AbortedError(absl::StrCat(
                          job.job.id(), " ended (", v1::JobState_Name(state),
                          "): ", reason)));
  job.layout.DropReference();
}

void Coordinator::StartEpoch(JobRec& job,
                             const std::vector<int64_t>& worker_nums,
                             std::string reason) {
  FailJobWaiters(job, absl::AbortedError(absl::StrCat(
                          job.job.id(), " restarted with epoch ",
                          job.job.epoch() + 1)));
  job.layout.Reset(static_cast<int>(worker_nums.size()));
  job.recovering = false;
  job.job.set_epoch(job.job.epoch() + 1);
  job.job.clear_members();
  job.run_job_spec.reset();
  job.ranks.assign(worker_nums.size(), RankRec{});
  job.finished_ranks = 0;
  for (size_t r = 0; r < worker_nums.size(); ++r) {
    WorkerRec& w = *workers_[worker_nums[r]];
    job.ranks[r].worker_num = w.num;
    v1::JobMember* m = job.job.add_members();
    m->set_rank(static_cast<int>(r));
    m->set_worker_id(w.info.id());
    m->set_host(w.info.host());
    w.job_num = job.num;
    w.epoch = job.job.epoch();
    w.rank = static_cast<int>(r);
    w.acknowledged = false;
    w.run_job_sends = 0;
    w.missing_reports = 0;
    w.reports_assignment = false;
  }
  queued_.erase(job.num);
  active_.insert(job.num);
  Transition(job, v1::STARTING, std::move(reason));
}

void Coordinator::Schedule() {
  while (!queued_.empty()) {
    JobRec& job = *jobs_[*queued_.begin()];
    const int world_size = job.job.spec().world_size();
    std::vector<IdleWorker> idle;
    for (const auto& [num, w] : workers_) {
      if (w->confirmed && !w->lost && !w->info.drain_requested() &&
          w->job_num == 0) {
        idle.push_back({num, w->info.host()});
      }
    }
    std::vector<int64_t> placed = PlaceRanks(std::move(idle), world_size);
    if (placed.empty()) return;  // FIFO: later jobs wait behind the head.
    StartEpoch(job, placed,
               absl::StrCat("scheduled on ", world_size, " workers (epoch ",
                            job.job.epoch() + 1, ")"));
  }
}

void Coordinator::MarkLost(WorkerRec& w, const std::string& why) {
  w.lost = true;
  w.directives.clear();
  if (w.job_num != 0) {
    auto it = jobs_.find(w.job_num);
    if (it != jobs_.end()) {
      JobRec& job = *it->second;
      EndJob(job, v1::FAILED,
             absl::StrCat("worker ", w.info.id(), " (rank ", w.rank,
                          ") lost: ", why));
    }
  }
  // EndJob released the rank; make sure nothing stays attached.
  w.job_num = 0;
  w.rank = -1;
}

void Coordinator::Acknowledge(JobRec& job, int rank) {
  auto it = workers_.find(job.ranks[rank].worker_num);
  if (it == workers_.end()) return;
  WorkerRec& w = *it->second;
  if (w.job_num == job.num && w.epoch == job.job.epoch()) {
    w.acknowledged = true;
  }
}

void Coordinator::CheckRecovery(JobRec& job) {
  if (!job.recovering) return;
  bool all_continue = job.job.state() == v1::RUNNING;
  std::vector<int64_t> nums;
  for (const RankRec& r : job.ranks) {
    nums.push_back(r.worker_num);
    if (r.finished) continue;
    const WorkerRec& w = *workers_[r.worker_num];
    if (!w.heartbeated) return;  // still waiting for this one
    if (!w.reports_assignment) all_continue = false;
  }
  job.recovering = false;
  if (all_continue) return;
  // Some rank cannot continue where it was: run the whole job again on the
  // same workers with a new epoch. Ranks that had already finished are
  // reassigned too (their workers may have taken nothing else: nothing was
  // scheduled while the job was recovering unless they were free).
  for (int64_t num : nums) {
    WorkerRec& w = *workers_[num];
    if (w.lost || (w.job_num != 0 && w.job_num != job.num)) {
      EndJob(job, v1::FAILED,
             absl::StrCat("cannot restart after coordinator restart: worker ",
                          w.info.id(), " is ", w.lost ? "lost" : "busy"));
      return;
    }
  }
  for (int r = 0; r < static_cast<int>(job.ranks.size()); ++r) {
    if (!job.ranks[r].finished) ReleaseRank(job, r, true, "job restarted");
  }
  StartEpoch(job, nums,
             absl::StrCat("coordinator restarted; restarting on the same "
                          "workers with epoch ",
                          job.job.epoch() + 1));
}

void Coordinator::FlushProgress(JobRec& job) {
  AppendEvent(job, job.log.TakeProgressEvent(job.job.progress(), clock_->Now()));
  PersistJob(job);
}

// ---- Membership ----

absl::StatusOr<v1::RegisterWorkerResponse> Coordinator::RegisterWorker(
    const v1::RegisterWorkerRequest& req) {
  if (!ValidWorkerName(req.name())) {
    return absl::InvalidArgumentError(
        "name: must be 1..253 characters of [A-Za-z0-9._:-]");
  }
  if (req.incarnation().empty() || req.incarnation().size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("incarnation: must be 1..64 characters, got ",
                     req.incarnation().size()));
  }
  if (req.address().size() > 261) {
    return absl::InvalidArgumentError("address: at most 261 characters");
  }
  if (req.host().size() > 253) {
    return absl::InvalidArgumentError("host: at most 253 characters");
  }
  if (req.device().size() > 256) {
    return absl::InvalidArgumentError("device: at most 256 characters");
  }
  if (!v1::DeviceKind_IsValid(req.device_kind())) {
    return absl::InvalidArgumentError(
        absl::StrCat("device_kind: unknown value ", req.device_kind()));
  }
  Locked lock(this);
  const absl::Time now = clock_->Now();
  WorkerRec* w = nullptr;
  auto it = worker_by_name_.find(req.name());
  if (it != worker_by_name_.end()) {
    w = workers_[it->second].get();
    if (w->info.incarnation() != req.incarnation()) {
      // The process restarted: its old membership ends, and with it its rank.
      if (!w->lost && w->job_num != 0) {
        MarkLost(*w, "it restarted (new incarnation)");
      }
      w->directives.clear();
      w->info.set_drain_requested(false);
      *w->info.mutable_registered_time() = ToProto(now);
    }
  } else {
    if (static_cast<int>(workers_.size()) >= options_.max_workers) {
      return absl::ResourceExhaustedError(
          absl::StrCat("worker registry full (", options_.max_workers, ")"));
    }
    auto rec = std::make_unique<WorkerRec>();
    rec->num = ++next_worker_;
    rec->info.set_id(WorkerId(rec->num));
    rec->info.set_name(req.name());
    *rec->info.mutable_registered_time() = ToProto(now);
    w = rec.get();
    worker_by_name_[req.name()] = rec->num;
    workers_[rec->num] = std::move(rec);
  }
  w->info.set_incarnation(req.incarnation());
  w->info.set_address(req.address());
  w->info.set_host(req.host());
  w->info.set_device_kind(req.device_kind());
  w->info.set_device(req.device());
  w->lost = false;
  w->confirmed = true;
  w->last_heartbeat = now;
  next_loss_check_ =
      std::min(next_loss_check_, now + options_.worker_timeout);
  PersistWorker(*w);
  Schedule();
  v1::RegisterWorkerResponse resp;
  resp.set_worker_id(w->info.id());
  *resp.mutable_heartbeat_interval() = ToProto(options_.heartbeat_interval);
  RETURN_IF_ERROR(lock.Commit());
  return resp;
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::Heartbeat(
    const v1::HeartbeatRequest& req) {
  ASSIGN_OR_RETURN(SharedHeartbeat shared, HeartbeatShared(req));
  if (shared.run_job_spec != nullptr) {
    for (v1::Directive& d : *shared.response.mutable_directives()) {
      if (d.has_run_job()) {
        *d.mutable_run_job()->mutable_spec() = *shared.run_job_spec;
      }
    }
  }
  return std::move(shared.response);
}

absl::StatusOr<Coordinator::SharedHeartbeat> Coordinator::HeartbeatShared(
    const v1::HeartbeatRequest& req) {
  Locked lock(this);
  WorkerRec* w = FindWorker(req.worker_id());
  if (w == nullptr || w->lost || w->info.incarnation() != req.incarnation()) {
    return absl::NotFoundError(absl::StrCat(
        "worker ", Clip(req.worker_id(), 64),
        w == nullptr ? " is unknown"
                     : (w->lost ? " was declared lost"
                                : " has a newer incarnation"),
        "; register again"));
  }
  const bool was_confirmed = w->confirmed;
  w->confirmed = true;
  w->heartbeated = true;
  w->last_heartbeat = clock_->Now();
  if (req.state() == v1::DRAINING && !w->info.drain_requested()) {
    // The worker is on its way out (it was told to drain before).
    w->info.set_drain_requested(true);
    PersistWorker(*w);
  }

  const bool reports_job = !req.job_id().empty() && req.state() != v1::IDLE;
  auto matches_assignment = [&] {
    return w->job_num != 0 && reports_job &&
           req.job_id() == JobId(w->job_num) && req.epoch() == w->epoch;
  };
  w->reports_assignment = matches_assignment();
  // After a coordinator restart this heartbeat may complete the picture of
  // the worker's job; decide before building the reply, which may then
  // carry the restarted job's directives.
  if (w->job_num != 0) CheckRecovery(*jobs_[w->job_num]);
  const bool reports_assignment = matches_assignment();
  w->reports_assignment = reports_assignment;

  SharedHeartbeat out;
  v1::HeartbeatResponse& resp = out.response;
  for (v1::Directive& d : w->directives) *resp.add_directives() = std::move(d);
  w->directives.clear();

  if (reports_job && !reports_assignment) {
    // The worker runs something it is not (or no longer) assigned.
    bool already = false;
    for (const v1::Directive& d : resp.directives()) {
      already |= d.has_abort_job() && d.abort_job().job_id() == req.job_id() &&
                 d.abort_job().epoch() == req.epoch();
    }
    if (!already) {
      auto* abort = resp.add_directives()->mutable_abort_job();
      abort->set_job_id(Clip(req.job_id(), 64));
      abort->set_epoch(req.epoch());
      abort->set_reason("this worker is not assigned to that job and epoch");
    }
  }
  if (w->job_num != 0) {
    JobRec& job = *jobs_[w->job_num];
    if (reports_assignment) {
      w->acknowledged = true;
      w->missing_reports = 0;
    } else if (!w->acknowledged) {
      if (++w->run_job_sends > options_.max_unacknowledged_run_jobs) {
        EndJob(job, v1::FAILED,
               absl::StrCat("worker ", w->info.id(), " (rank ", w->rank,
                            ") did not start the job after ",
                            options_.max_unacknowledged_run_jobs,
                            " RunJob directives"));
      } else {
        auto* run = resp.add_directives()->mutable_run_job();
        run->set_job_id(job.job.id());
        run->set_epoch(job.job.epoch());
        run->set_rank(w->rank);
        run->set_world_size(job.job.spec().world_size());
        if (job.run_job_spec == nullptr) {
          job.run_job_spec = std::make_shared<const v1::JobSpec>(job.job.spec());
        }
        out.run_job_spec = job.run_job_spec;
      }
    } else if (!job.recovering && ++w->missing_reports >= 2) {
      EndJob(job, v1::FAILED,
             absl::StrCat("worker ", w->info.id(), " (rank ", w->rank,
                          ") stopped running the job (it reports ",
                          v1::WorkerState_Name(req.state()),
                          req.job_id().empty() ? "" : " ",
                          Clip(req.job_id(), 64), ")"));
    }
  }
  if (!was_confirmed) Schedule();
  // A reply without directives only tells the worker to carry on, which no
  // unwritten change of another section can contradict (a change that
  // concerns this worker queues a directive for it). So it waits only for
  // its own writes, not behind a burst of other ranks' results being
  // written (the heartbeat p99 at a 4096-rank job's end).
  RETURN_IF_ERROR(lock.Commit(resp.directives_size() == 0
                                  ? CommitWait::kOwnBatch
                                  : CommitWait::kAllSealed));
  return out;
}

absl::StatusOr<Coordinator::WorkerRec*> Coordinator::ResolveWorker(
    absl::string_view worker) const {
  if (std::optional<int64_t> num = ParseId(worker, kWorkerPrefix)) {
    auto it = workers_.find(*num);
    if (it != workers_.end()) return it->second.get();
  }
  auto by_name = worker_by_name_.find(worker);
  if (by_name != worker_by_name_.end()) {
    return workers_.at(by_name->second).get();
  }
  return absl::NotFoundError(absl::StrCat(
      "no worker \"", Clip(worker, 253), "\" (neither a worker id nor a name)"));
}

absl::StatusOr<v1::WorkerInfo> Coordinator::GetWorker(
    absl::string_view worker) const {
  Locked lock(this);
  ASSIGN_OR_RETURN(const WorkerRec* w, ResolveWorker(worker));
  return InfoOf(*w);
}

absl::StatusOr<v1::WorkerInfo> Coordinator::DrainWorker(
    absl::string_view worker) {
  return SetDrainRequested(worker, true);
}

absl::StatusOr<v1::WorkerInfo> Coordinator::UndrainWorker(
    absl::string_view worker) {
  return SetDrainRequested(worker, false);
}

absl::StatusOr<v1::WorkerInfo> Coordinator::SetDrainRequested(
    absl::string_view worker, bool drain) {
  Locked lock(this);
  ASSIGN_OR_RETURN(WorkerRec * w, ResolveWorker(worker));
  if (w->lost) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", w->info.id(), " (", w->info.name(),
        ") is LOST; it can be ", drain ? "drained" : "undrained",
        " once it registers again"));
  }
  if (w->info.drain_requested() != drain) {
    w->info.set_drain_requested(drain);
    PersistWorker(*w);
    if (!drain) Schedule();  // a queued job may fit now
  }
  v1::WorkerInfo info = InfoOf(*w);
  RETURN_IF_ERROR(lock.Commit());
  return info;
}

absl::StatusOr<Coordinator::WorkerPage> Coordinator::ListWorkers(
    bool include_lost, int page_size, absl::string_view page_token) const {
  ASSIGN_OR_RETURN(const int size, ResolvePageSize(page_size, kWorkerPages));
  const std::string filter = include_lost ? "lost=1" : "lost=0";
  int64_t after = 0;
  if (!page_token.empty()) {
    ASSIGN_OR_RETURN(after, DecodePageToken(page_token, "workers", filter));
  }
  Locked lock(this);
  WorkerPage page;
  int64_t last = after;
  for (auto it = workers_.upper_bound(after); it != workers_.end(); ++it) {
    const WorkerRec& w = *it->second;
    if (w.lost && !include_lost) continue;
    if (static_cast<int>(page.workers.size()) == size) {
      // There is more: the next page starts after the last one listed.
      page.next_page_token = EncodePageToken("workers", filter, last);
      break;
    }
    page.workers.push_back(InfoOf(w));
    last = it->first;
  }
  return page;
}

// ---- Jobs ----

absl::StatusOr<v1::Job> Coordinator::SubmitJob(const v1::JobSpec& spec) {
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  Locked lock(this);
  if (static_cast<int>(jobs_.size()) >= options_.max_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too many jobs kept (", options_.max_jobs, ")"));
  }
  if (static_cast<int>(queued_.size() + active_.size()) >=
      options_.max_unfinished_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too many unfinished jobs (", options_.max_unfinished_jobs,
                     "); wait for some to end"));
  }
  auto j = std::make_unique<JobRec>();
  j->num = ++next_job_;
  j->job.set_id(JobId(j->num));
  *j->job.mutable_spec() = ApplyJobSpecDefaults(spec);
  // Unknown fields would be stored and echoed to every rank: drop them.
  j->job.mutable_spec()->DiscardUnknownFields();
  j->job.set_state(v1::JOB_STATE_UNSPECIFIED);
  *j->job.mutable_submit_time() = ToProto(clock_->Now());
  j->job.mutable_progress()->set_total_steps(j->job.spec().steps());
  JobRec& job = *j;
  jobs_[j->num] = std::move(j);
  Transition(job, v1::QUEUED,
             absl::StrCat("submitted; waiting for ",
                          job.job.spec().world_size(), " idle workers"));
  // Transition() set start_time because it left UNSPECIFIED: undo that.
  job.job.clear_start_time();
  queued_.insert(job.num);
  Schedule();
  v1::Job out = job.job;
  RETURN_IF_ERROR(lock.Commit());
  return out;
}

absl::StatusOr<v1::Job> Coordinator::GetJob(absl::string_view job_id) const {
  Locked lock(this);
  const JobRec* j = FindJob(job_id);
  if (j == nullptr) {
    return absl::NotFoundError(absl::StrCat("no job ", Clip(job_id, 64)));
  }
  return j->job;
}

absl::StatusOr<Coordinator::JobPage> Coordinator::ListJobs(
    const std::vector<v1::JobState>& states, int page_size,
    absl::string_view page_token, int64_t max_bytes) const {
  ASSIGN_OR_RETURN(const int size, ResolvePageSize(page_size, kJobPages));
  for (v1::JobState s : states) {
    if (!v1::JobState_IsValid(s) || s == v1::JOB_STATE_UNSPECIFIED) {
      return absl::InvalidArgumentError(
          absl::StrCat("states: unknown job state ", static_cast<int>(s)));
    }
  }
  std::vector<int> wanted(states.begin(), states.end());
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  const std::string filter = absl::StrCat("states=", absl::StrJoin(wanted, ","));
  // Newest first: the next page starts below the last job listed.
  int64_t before = INT64_MAX;
  if (!page_token.empty()) {
    ASSIGN_OR_RETURN(before, DecodePageToken(page_token, "jobs", filter));
  }
  Locked lock(this);
  JobPage page;
  int64_t last = before;
  int64_t bytes = 0;
  for (auto it = std::make_reverse_iterator(jobs_.lower_bound(before));
       it != jobs_.rend(); ++it) {
    const v1::Job& job = it->second->job;
    if (!wanted.empty() &&
        !std::binary_search(wanted.begin(), wanted.end(), job.state())) {
      continue;
    }
    bytes += static_cast<int64_t>(job.ByteSizeLong()) + 8;
    if (static_cast<int>(page.jobs.size()) == size ||
        (bytes > max_bytes && !page.jobs.empty())) {
      page.next_page_token = EncodePageToken("jobs", filter, last);
      break;
    }
    page.jobs.push_back(job);
    last = it->first;
  }
  return page;
}

absl::StatusOr<v1::Job> Coordinator::CancelJob(absl::string_view job_id,
                                               absl::string_view reason) {
  if (reason.size() > static_cast<size_t>(options_.max_reason_length)) {
    return absl::InvalidArgumentError(
        absl::StrCat("reason: at most ", options_.max_reason_length,
                     " characters, got ", reason.size()));
  }
  Locked lock(this);
  JobRec* j = FindJob(job_id);
  if (j == nullptr) {
    return absl::NotFoundError(absl::StrCat("no job ", Clip(job_id, 64)));
  }
  if (IsTerminal(j->job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat(j->job.id(), " has already ended (",
                     v1::JobState_Name(j->job.state()), ")"));
  }
  EndJob(*j, v1::CANCELLED,
         reason.empty() ? std::string("cancelled by user")
                        : absl::StrCat("cancelled: ", Clip(reason)));
  Schedule();
  v1::Job out = j->job;
  RETURN_IF_ERROR(lock.Commit());
  return out;
}

absl::StatusOr<Coordinator::EventBatch> Coordinator::GetEvents(
    absl::string_view job_id, int64_t after_sequence, int max) const {
  if (after_sequence < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("after_sequence: must be >= 0, got ", after_sequence));
  }
  Locked lock(this);
  const JobRec* j = FindJob(job_id);
  if (j == nullptr) {
    return absl::NotFoundError(absl::StrCat("no job ", Clip(job_id, 64)));
  }
  EventBatch batch;
  batch.events = j->log.Read(after_sequence, max);
  batch.terminal = IsTerminal(j->job.state());
  return batch;
}

Coordinator::WaitId Coordinator::WaitForEvents(absl::string_view job_id,
                                               int64_t after_sequence,
                                               absl::Time deadline,
                                               EventsCallback done) {
  Locked lock(this);
  JobRec* j = FindJob(job_id);
  absl::Status immediate;
  bool ready = false;
  if (j == nullptr) {
    immediate = absl::NotFoundError(absl::StrCat("no job ", Clip(job_id, 64)));
  } else if (j->log.HasEventAfter(after_sequence) ||
             IsTerminal(j->job.state())) {
    ready = true;
  } else if (clock_->Now() >= deadline) {
    immediate = absl::DeadlineExceededError("no new event before the deadline");
  } else {
    immediate = waits_.CheckCapacity();
  }
  if (ready || !immediate.ok()) {
    Defer([done = std::move(done), immediate] { done(immediate); });
    return 0;
  }
  const WaitId id = Park(EventsWait{j->num, std::move(done)}, deadline);
  j->log.AddWaiter(id);
  return id;
}

// ---- Rendezvous ----

absl::Status Coordinator::KvPut(const v1::KvPutRequest& req) {
  RETURN_IF_ERROR(RendezvousStore::CheckKey(req.key(), kv_limits_));
  RETURN_IF_ERROR(RendezvousStore::CheckValue(req.value(), kv_limits_));
  Locked lock(this);
  ASSIGN_OR_RETURN(JobRec * j, ActiveJobAt(req.job_id(), req.epoch()));
  ASSIGN_OR_RETURN(std::vector<WaitId> woken,
                   j->kv.Put(j->job.id(), req.key(), req.value(), kv_limits_,
                             kv_bytes_total_));
  for (WaitId id : woken) {
    std::optional<KvWait> w = waits_.Take<KvWait>(id);
    if (!w) continue;
    Defer([done = std::move(w->done), value = req.value()] { done(value); });
  }
  return absl::OkStatus();
}

Coordinator::WaitId Coordinator::KvGet(absl::string_view job_id,
                                       int64_t epoch, absl::string_view key,
                                       absl::Time deadline, KvCallback done) {
  Locked lock(this);
  absl::StatusOr<std::string> immediate;
  bool answer = true;
  if (absl::Status bad = RendezvousStore::CheckKey(key, kv_limits_);
      !bad.ok()) {
    immediate = bad;
  } else {
    absl::StatusOr<JobRec*> j = ActiveJobAt(job_id, epoch);
    if (!j.ok()) {
      immediate = j.status();
    } else {
      if (const std::string* value = (*j)->kv.Get(key); value != nullptr) {
        immediate = *value;
      } else if (clock_->Now() >= deadline) {
        immediate = absl::DeadlineExceededError(absl::StrCat(
            "key \"", Clip(key, 64), "\" did not appear before the deadline"));
      } else if (absl::Status cap = waits_.CheckCapacity(); !cap.ok()) {
        immediate = cap;
      } else {
        answer = false;
        const WaitId id =
            Park(KvWait{(*j)->num, epoch, std::move(done)}, deadline);
        (*j)->kv.AddWaiter(key, id);
        return id;
      }
    }
  }
  if (answer) {
    Defer([done = std::move(done), immediate = std::move(immediate)] {
      done(immediate);
    });
  }
  return 0;
}

// ---- Buckets and assignment ----

absl::StatusOr<v1::ReportBucketsResponse> Coordinator::ReportBuckets(
    const v1::ReportBucketsRequest& req) {
  LayoutReport report;
  report.job_id = req.job_id();
  report.epoch = req.epoch();
  report.rank = req.rank();
  report.worker_id = req.worker_id();
  report.layout = EncodedLayout::FromBuckets(req.buckets());
  report.fingerprint = req.layout_fingerprint();
  Locked lock(this);
  // A deadline in the past: an unknown fingerprint is answered at once.
  bool needs_commit = false;
  std::optional<absl::StatusOr<v1::ReportBucketsResponse>> answer =
      ReportBucketsLocked(report, absl::InfinitePast(), nullptr, nullptr,
                          &needs_commit);
  if (needs_commit) RETURN_IF_ERROR(lock.Commit());
  return *std::move(answer);
}

Coordinator::WaitId Coordinator::ReportLayout(const LayoutReport& report,
                                             absl::Time deadline,
                                             ReportCallback done) {
  std::optional<absl::StatusOr<v1::ReportBucketsResponse>> answer;
  {
    Locked lock(this);
    WaitId id = 0;
    bool needs_commit = false;
    answer = ReportBucketsLocked(report, deadline, &id, &done, &needs_commit);
    if (!answer.has_value()) return id;
    if (needs_commit) {
      if (absl::Status s = lock.Commit(); !s.ok()) answer = s;
    }
  }
  // Answered here, not deferred: the report that completes the set would
  // otherwise be answered after the thousands of assignment callbacks it
  // released (on the notifier thread).
  done(*std::move(answer));
  return 0;
}

std::optional<absl::StatusOr<v1::ReportBucketsResponse>>
Coordinator::ReportBucketsLocked(const LayoutReport& report,
                                 absl::Time deadline, WaitId* parked,
                                 ReportCallback* done, bool* needs_commit) {
  const int64_t epoch = report.epoch;
  const int rank = report.rank;
  const std::string& fingerprint = report.fingerprint;
  const bool by_fingerprint = report.layout.empty() && !fingerprint.empty();
  if (by_fingerprint && fingerprint.size() != shard::kLayoutFingerprintBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout_fingerprint: must be ", shard::kLayoutFingerprintBytes,
                     " bytes (SHA-256), got ", fingerprint.size()));
  }
  absl::StatusOr<JobRec*> found = ActiveJobAt(report.job_id, epoch);
  if (!found.ok()) return found.status();
  JobRec* j = *found;
  if (absl::Status s = CheckRank(*j, rank, report.worker_id); !s.ok()) {
    return s;
  }
  Acknowledge(*j, rank);
  v1::ReportBucketsResponse resp;
  auto fail = [&](const std::string& reason) -> absl::Status {
    EndJob(*j, v1::FAILED, reason);
    Schedule();
    *needs_commit = true;
    return absl::InvalidArgumentError(reason);
  };
  if (!j->layout.MatchesReference(report.layout, fingerprint,
                                  by_fingerprint)) {
    if (!j->layout.has_reference() && j->job.state() == v1::RUNNING) {
      // Recovered after a restart: the layout was checked before, and the
      // published assignment stands.
      return resp;
    }
    if (by_fingerprint) {
      // Nothing is recorded (the Acknowledge above needs no commit). Before
      // any rank has sent the layout in full, wait for one to do so, so
      // that ranks reporting at the same moment do not all have to send it;
      // otherwise this rank's layout differs and must be seen in full.
      if (!j->layout.has_reference() && clock_->Now() < deadline &&
          parked != nullptr && done != nullptr && waits_.CheckCapacity().ok()) {
        *parked = Park(LayoutWait{j->num, epoch, rank, std::string(fingerprint),
                                  std::move(*done)},
                       deadline);
        j->layout.AddWaiter(*parked);
        return std::nullopt;
      }
      resp.set_send_layout(true);
      return resp;
    }
    absl::StatusOr<bool> became_reference = j->layout.Accept(
        report.layout, rank, Who(*j, rank), options_.layout_limits);
    if (!became_reference.ok()) {
      return fail(std::string(became_reference.status().message()));
    }
    if (*became_reference) AnswerLayoutWaiters(*j);
  }
  j->layout.MarkReported(rank);
  if (j->job.state() == v1::STARTING && j->layout.complete()) {
    PublishAssignment(*j);
    Schedule();
  }
  *needs_commit = true;
  return resp;
}

void Coordinator::AnswerLayoutWaiters(JobRec& job) {
  for (WaitId id : job.layout.TakeWaiters()) {
    std::optional<LayoutWait> w = waits_.Take<LayoutWait>(id);
    if (!w) continue;
    v1::ReportBucketsResponse resp;
    if (!job.layout.AcceptFingerprint(w->rank, w->fingerprint)) {
      resp.set_send_layout(true);
    }
    Defer([done = std::move(w->done), resp] { done(resp); });
  }
}

void Coordinator::PublishAssignment(JobRec& job) {
  absl::StatusOr<v1::ShardAssignment> a = shard::BuildShardAssignment(
      job.job.id(), job.job.epoch(), job.job.spec().assignment_policy(),
      job.layout.reference(), job.job.members());
  if (!a.ok()) {
    EndJob(job, v1::FAILED,
           absl::StrCat("cannot compute the assignment: ", a.status().message()));
    return;
  }
  job.assignment = std::make_shared<const v1::ShardAssignment>(*std::move(a));
  job.assignment_owners =
      std::make_shared<const v1::ShardAssignment>(shard::OwnersView(*job.assignment));
  pending_->assignments.emplace_back(job.num, *job.assignment);
  Transition(job, v1::RUNNING,
             absl::StrFormat("assignment published: epoch %d, %d buckets, "
                             "policy %s, imbalance %.4f",
                             job.job.epoch(), job.assignment->buckets_size(),
                             v1::JobSpec::AssignmentPolicy_Name(
                                 job.assignment->policy()),
                             job.assignment->imbalance()));
  for (WaitId id : job.assignment_waiters) {
    std::optional<AssignmentWait> w = waits_.Take<AssignmentWait>(id);
    if (!w) continue;
    AssignmentPtr a = w->owners_view ? job.assignment_owners : job.assignment;
    Defer([done = std::move(w->done), a = std::move(a)] { done(a); });
  }
  job.assignment_waiters.clear();
}

Coordinator::WaitId Coordinator::GetAssignment(absl::string_view job_id,
                                               int64_t epoch,
                                               v1::AssignmentView view,
                                               absl::Time deadline,
                                               AssignmentCallback done) {
  Locked lock(this);
  absl::StatusOr<AssignmentPtr> immediate;
  const bool owners_view = view == v1::ASSIGNMENT_VIEW_OWNERS;
  JobRec* j = FindJob(job_id);
  if (!v1::AssignmentView_IsValid(view)) {
    immediate = absl::InvalidArgumentError(
        absl::StrCat("view: unknown assignment view ", static_cast<int>(view)));
  } else if (j == nullptr) {
    immediate = absl::NotFoundError(absl::StrCat("no job ", Clip(job_id, 64)));
  } else if (epoch != j->job.epoch()) {
    immediate = absl::FailedPreconditionError(absl::StrCat(
        j->job.id(), ": epoch ", epoch, " is ",
        epoch < j->job.epoch() ? "stale" : "unknown", "; current epoch is ",
        j->job.epoch()));
  } else if (j->assignment && j->assignment->epoch() == epoch) {
    immediate = owners_view ? j->assignment_owners : j->assignment;
  } else if (!IsActive(j->job.state())) {
    immediate = absl::FailedPreconditionError(absl::StrCat(
        j->job.id(), " is ", v1::JobState_Name(j->job.state()),
        " and has no assignment for epoch ", epoch));
  } else if (clock_->Now() >= deadline) {
    immediate = absl::DeadlineExceededError(
        absl::StrCat(j->job.id(), ": assignment for epoch ", epoch,
                     " not published before the deadline (",
                     j->layout.reported(), " of ", j->ranks.size(),
                     " ranks reported their layout)"));
  } else if (absl::Status cap = waits_.CheckCapacity(); !cap.ok()) {
    immediate = cap;
  } else {
    const WaitId id =
        Park(AssignmentWait{j->num, epoch, owners_view, std::move(done)},
             deadline);
    j->assignment_waiters.push_back(id);
    return id;
  }
  Defer([done = std::move(done), immediate = std::move(immediate)] {
    done(immediate);
  });
  return 0;
}

absl::StatusOr<v1::ShardAssignment> Coordinator::GetShardAssignment(
    absl::string_view job_id) const {
  Locked lock(this);
  const JobRec* j = FindJob(job_id);
  if (j == nullptr) {
    return absl::NotFoundError(absl::StrCat("no job ", Clip(job_id, 64)));
  }
  if (!j->assignment) {
    return absl::FailedPreconditionError(absl::StrCat(
        j->job.id(), " has no assignment yet (",
        v1::JobState_Name(j->job.state()),
        j->job.state() == v1::STARTING
            ? absl::StrCat(", ", j->layout.reported(), " of ", j->ranks.size(),
                           " ranks reported their bucket layout")
            : "",
        ")"));
  }
  return *j->assignment;
}

// ---- Progress and results ----

absl::StatusOr<v1::ReportProgressResponse> Coordinator::ReportProgress(
    const v1::ReportProgressRequest& req) {
  if (req.progress().step() < 0 || req.progress().bytes_sent() < 0) {
    return absl::InvalidArgumentError(
        "progress: step and bytes_sent must be >= 0");
  }
  Locked lock(this);
  JobRec* j = FindJob(req.job_id());
  if (j == nullptr) {
    return absl::NotFoundError(absl::StrCat("no job ", Clip(req.job_id(), 64)));
  }
  v1::ReportProgressResponse resp;
  if (!IsActive(j->job.state()) || req.epoch() != j->job.epoch()) {
    resp.set_abort(true);
    return resp;
  }
  RETURN_IF_ERROR(CheckRank(*j, req.rank(), req.worker_id()));
  Acknowledge(*j, req.rank());
  if (req.rank() == 0) {
    v1::JobProgress* p = j->job.mutable_progress();
    *p = req.progress();
    p->DiscardUnknownFields();
    p->set_total_steps(j->job.spec().steps());
    j->log.NoteProgress();
    if (j->log.ProgressDue(clock_->Now(), options_.progress_event_interval) ||
        p->step() >= p->total_steps()) {
      FlushProgress(*j);
    }
  }
  RETURN_IF_ERROR(lock.Commit());
  return resp;
}

absl::Status Coordinator::ReportResult(const v1::ReportResultRequest& req) {
  Locked lock(this);
  ASSIGN_OR_RETURN(const bool changed, ReportResultLocked(req));
  return changed ? lock.Commit() : absl::OkStatus();
}

void Coordinator::ReportResultAsync(const v1::ReportResultRequest& req,
                                    std::function<void(absl::Status)> done) {
  Locked lock(this);
  absl::StatusOr<bool> changed = ReportResultLocked(req);
  if (changed.ok() && *changed) {
    lock.CommitInBackground(std::move(done));
    return;
  }
  Defer([done = std::move(done), status = changed.status()] { done(status); });
}

absl::StatusOr<bool> Coordinator::ReportResultLocked(
    const v1::ReportResultRequest& req) {
  JobRec* j = FindJob(req.job_id());
  if (j == nullptr) {
    return absl::NotFoundError(absl::StrCat("no job ", Clip(req.job_id(), 64)));
  }
  if (!IsActive(j->job.state()) || req.epoch() != j->job.epoch()) {
    return false;  // Nothing to do; the worker is free anyway.
  }
  RETURN_IF_ERROR(CheckRank(*j, req.rank(), req.worker_id()));
  const int rank = req.rank();
  if (j->ranks[rank].finished) return false;  // a retry
  if (!req.ok()) {
    j->ranks[rank].finished = true;
    ++j->finished_ranks;
    ReleaseRank(*j, rank, false, "");
    EndJob(*j, v1::FAILED,
           absl::StrCat(Who(*j, rank), " failed: ",
                        req.error().empty() ? "no error given"
                                            : Clip(req.error())));
    Schedule();
    return true;
  }
  // A program job's ranks may end without ever using the client library
  // (no layout, no assignment: the job stays STARTING); its agent's
  // success is the program's exit status 0.
  if (j->job.state() != v1::RUNNING && !j->job.spec().has_program()) {
    return absl::FailedPreconditionError(
        absl::StrCat(j->job.id(), ": rank ", rank,
                     " reported success before the assignment was published"));
  }
  if (req.output_path().size() > 4096) {
    return absl::InvalidArgumentError("output_path: at most 4096 characters");
  }
  j->ranks[rank].finished = true;
  ++j->finished_ranks;
  pending_->finished_ranks.push_back({j->num, j->job.epoch(), rank});
  ReleaseRank(*j, rank, false, "");
  if (rank == 0) {
    if (!req.output_path().empty()) j->job.set_output_path(req.output_path());
    if (req.final_step() > j->job.progress().step()) {
      j->job.mutable_progress()->set_step(req.final_step());
      j->log.NoteProgress();
    }
    PersistJob(*j);
  }
  if (j->finished_ranks == static_cast<int>(j->ranks.size())) {
    EndJob(*j, v1::SUCCEEDED,
           absl::StrCat("all ", j->ranks.size(), " ranks finished ",
                        j->job.progress().step(), " steps"));
  }
  Schedule();
  return true;
}

// ---- Waits and time ----

void Coordinator::CancelWait(WaitId id) {
  absl::MutexLock lock(&mu_);
  waits_.Cancel(id);  // per-job lists skip ids that are gone
}

void Coordinator::Expire(Wait& wait) {
  std::visit(
      [this](auto& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        using W = std::decay_t<decltype(w)>;
        if constexpr (std::is_same_v<W, LayoutWait>) {
          // Nobody sent the layout in full in time: this rank sends it.
          v1::ReportBucketsResponse send;
          send.set_send_layout(true);
          Defer([done = std::move(w.done), send] { done(send); });
        } else {
          std::string what = "no new event before the deadline";
          if constexpr (std::is_same_v<W, KvWait>) {
            what = "rendezvous key did not appear before the deadline";
          } else if constexpr (std::is_same_v<W, AssignmentWait>) {
            what = "assignment not published before the deadline";
            auto j = jobs_.find(w.job_num);
            if (j != jobs_.end()) {
              absl::StrAppend(&what, " (", j->second->layout.reported(),
                              " of ", j->second->ranks.size(),
                              " ranks reported their bucket layout)");
            }
          }
          Defer([done = std::move(w.done),
                 s = absl::DeadlineExceededError(what)] { done(s); });
        }
      },
      wait);
}

void Coordinator::Tick() {
  Locked lock(this);
  const absl::Time now = clock_->Now();
  // Worker loss: scan only when the earliest possible loss is due (a
  // heartbeat only ever moves a worker's limit later).
  if (now >= next_loss_check_) {
    next_loss_check_ = absl::InfiniteFuture();
    for (auto& [num, w] : workers_) {
      if (w->lost) continue;
      absl::Time limit = w->last_heartbeat + options_.worker_timeout;
      if (!w->confirmed) {
        limit = std::max(limit, started_ + options_.recovery_grace);
      }
      if (now > limit) {
        MarkLost(*w, w->confirmed
                         ? absl::StrCat("no heartbeat for ",
                                        absl::FormatDuration(now - w->last_heartbeat))
                         : absl::StrCat("not back within ",
                                        absl::FormatDuration(options_.recovery_grace),
                                        " of a coordinator restart"));
      } else {
        next_loss_check_ = std::min(next_loss_check_, limit);
      }
    }
  }
  // Wait deadlines, earliest first.
  for (Wait& wait : waits_.TakeExpired(now)) Expire(wait);
  for (int64_t num : std::vector<int64_t>(active_.begin(), active_.end())) {
    JobRec& job = *jobs_[num];
    if (job.log.progress_dirty() &&
        job.log.ProgressDue(now, options_.progress_event_interval)) {
      FlushProgress(job);
    }
    CheckRecovery(job);
  }
  Schedule();
  absl::Status s = lock.Commit();
  if (!s.ok()) {
    // Nothing to answer here; the next state change reports the failure.
    fprintf(stderr, "pshard-coordinator: commit failed in Tick: %s\n",
            std::string(s.message()).c_str());
  }
}

}  // namespace coordinator
}  // namespace pshard
