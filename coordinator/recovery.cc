#include "coordinator/recovery.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "coordinator/ids.h"
#include "shard/layout.h"

namespace pshard {
namespace coordinator {

namespace {

// Job `num` from the snapshot, into `jobs`: its log, latest assignment and
// ranks (an active job's, with which finished). Assigns no worker. Sets
// `*broken` when a rank names an unknown worker (that rank holds none).
JobRec& RestoreJob(int64_t num, StateStore::Snapshot& snap,
                   const WorkerRegistry& workers, JobTable& jobs,
                   std::string* broken) {
  JobRec& j = jobs.Restore(num, std::move(snap.jobs[num]));
  j.log.Restore(std::move(snap.events[num]));
  auto a = snap.assignments.find(num);
  if (a != snap.assignments.end()) {
    j.assignment =
        std::make_shared<const v1::ShardAssignment>(std::move(a->second));
    j.assignment_owners = std::make_shared<const v1::ShardAssignment>(
        shard::OwnersView(*j.assignment));
  }
  const v1::JobState state = j.job.state();
  if (!IsActive(state)) return j;
  const std::set<int>& finished = snap.finished_ranks[num];
  for (const v1::JobMember& m : j.job.members()) {
    RankRec r;
    std::optional<int64_t> wnum = ParseWorkerId(m.worker_id());
    if (!wnum || workers.Find(*wnum) == nullptr) {
      *broken = absl::StrCat("rank ", m.rank(), " names unknown worker ",
                             Clip(m.worker_id(), 64));
    } else {
      r.worker_num = *wnum;
    }
    r.finished = finished.count(m.rank()) > 0;
    j.finished_ranks += r.finished ? 1 : 0;
    j.ranks.push_back(r);
  }
  SetLocalRanks(j);
  // A RUNNING job's layout was checked before.
  j.layout.Reset(static_cast<int>(j.ranks.size()),
                 /*all_reported=*/state == v1::RUNNING);
  return j;
}

}  // namespace

std::vector<std::pair<JobRec*, std::string>> RestoreSnapshot(
    StateStore::Snapshot snap, absl::Time now, WorkerRegistry& workers,
    JobTable& jobs) {
  for (auto& [num, info] : snap.workers) {
    workers.Restore(num, std::move(info), now);
  }
  std::vector<int64_t> job_nums;
  for (const auto& [num, job] : snap.jobs) job_nums.push_back(num);
  std::vector<std::pair<JobRec*, std::string>> broken_jobs;
  for (int64_t num : job_nums) {
    std::string broken;
    JobRec& j = RestoreJob(num, snap, workers, jobs, &broken);
    if (!IsActive(j.job.state())) continue;
    j.recovering = true;
    if (!broken.empty()) {
      broken_jobs.emplace_back(
          &j, absl::StrCat("state database inconsistent after restart: ",
                           broken));
      continue;
    }
    for (size_t r = 0; r < j.ranks.size(); ++r) {
      if (j.ranks[r].finished) continue;
      WorkerRec& w = *workers.Find(j.ranks[r].worker_num);
      w.Assign(num, j.job.epoch(), static_cast<int>(r));
      w.acknowledged = true;
    }
  }
  return broken_jobs;
}

RestoredRecords RestoreRecords(StateStore::Snapshot snap,
                               const std::set<int64_t>& job_nums,
                               const std::set<int64_t>& worker_nums,
                               WorkerRegistry& workers, JobTable& jobs) {
  for (int64_t num : worker_nums) {
    auto stored = snap.workers.find(num);
    WorkerRec* w = workers.Find(num);
    if (w == nullptr) continue;
    if (stored == snap.workers.end()) {
      workers.Remove(num);  // its registration did not commit
      continue;
    }
    if (w->info.incarnation() != stored->second.incarnation()) {
      // A re-registration that did not commit: its stream and directives
      // belong to the new process.
      w->attachment_id = 0;
      w->directives.clear();
    }
    w->info = std::move(stored->second);
  }
  RestoredRecords out;
  std::vector<JobRec*> restored;
  for (int64_t num : job_nums) {
    std::unique_ptr<JobRec> old = jobs.Remove(num);
    JobRec* j = nullptr;
    if (snap.jobs.count(num) > 0) {
      std::string broken;  // every member was committed with its job
      j = &RestoreJob(num, snap, workers, jobs, &broken);
      restored.push_back(j);
    }
    const bool same_epoch = old != nullptr && j != nullptr &&
                            IsActive(j->job.state()) &&
                            old->job.state() == j->job.state() &&
                            old->job.epoch() == j->job.epoch();
    if (old != nullptr) {
      // Ranks memory gave that the store does not have: released (below,
      // the restored job assigns its own).
      for (const RankRec& r : old->ranks) {
        WorkerRec* w = workers.Find(r.worker_num);
        if (w == nullptr || w->job_num != num) continue;
        const bool kept = j != nullptr && IsActive(j->job.state()) &&
                          w->epoch == j->job.epoch() && w->rank >= 0 &&
                          w->rank < static_cast<int>(j->ranks.size()) &&
                          j->ranks[w->rank].worker_num == w->num &&
                          !j->ranks[w->rank].finished;
        if (!kept) w->Release();
      }
    }
    if (same_epoch) {
      // The epoch goes on: its runtime stays.
      j->layout = std::move(old->layout);
      j->kv = std::move(old->kv);
      j->assignment_waiters = std::move(old->assignment_waiters);
      j->run_job_spec = std::move(old->run_job_spec);
      j->checkpoints = std::move(old->checkpoints);
      j->held_failure = std::move(old->held_failure);
      j->recovering = old->recovering;
      for (WaitId id : old->log.TakeWaiters()) j->log.AddWaiter(id);
    } else if (old != nullptr) {
      out.replaced.push_back(std::move(old));
    }
    if (j != nullptr && IsActive(j->job.state()) && !same_epoch) {
      j->recovering = true;
    }
  }
  // Ranks after every release, so that a worker moved between two of these
  // jobs ends where the store has it.
  for (JobRec* j : restored) {
    if (!IsActive(j->job.state())) continue;
    for (size_t r = 0; r < j->ranks.size(); ++r) {
      if (j->ranks[r].finished) continue;
      WorkerRec* w = workers.Find(j->ranks[r].worker_num);
      if (w == nullptr) continue;
      if (!w->Holds(j->num, j->job.epoch()) || w->rank != static_cast<int>(r)) {
        w->Assign(j->num, j->job.epoch(), static_cast<int>(r));
        w->acknowledged = true;
      }
      // An undone release (a refused CancelJob): it runs the rank again.
      if (w->IsReleasing(j->job.id(), j->job.epoch())) w->releasing.reset();
      // Recovery waits for its next heartbeat to say what it runs.
      if (j->recovering) w->heartbeated = false;
      std::vector<v1::Directive>& ds = w->directives;
      ds.erase(std::remove_if(ds.begin(), ds.end(),
                              [&](const v1::Directive& d) {
                                return d.has_abort_job() &&
                                       d.abort_job().job_id() == j->job.id() &&
                                       d.abort_job().epoch() >= j->job.epoch();
                              }),
               ds.end());
      if (w->lost) out.lost_members.push_back(w);
    }
  }
  return out;
}

RecoveryDecision DecideRecovery(const JobRec& job,
                                const WorkerRegistry& workers) {
  RecoveryDecision d;
  bool all_continue = job.job.state() == v1::RUNNING;
  for (const RankRec& r : job.ranks) {
    d.worker_nums.push_back(r.worker_num);
    if (r.finished) continue;
    const WorkerRec* w = workers.Find(r.worker_num);
    if (w == nullptr || !w->heartbeated) return RecoveryDecision();  // kWait
    if (!w->reports_assignment) all_continue = false;
  }
  if (all_continue) {
    d.action = RecoveryAction::kContinue;
    d.worker_nums.clear();
    return d;
  }
  // Some rank cannot continue where it was: run the whole job again on the
  // same workers with a new epoch. Ranks that had already finished are
  // reassigned too (their workers may have taken nothing else: nothing was
  // scheduled while the job was recovering unless they were free).
  for (int64_t num : d.worker_nums) {
    const WorkerRec* w = workers.Find(num);
    const bool lost = w == nullptr || w->lost;
    if (lost || (w->job_num != 0 && w->job_num != job.num)) {
      d.action = RecoveryAction::kFail;
      d.reason = absl::StrCat(
          "cannot restart after coordinator restart: worker ",
          w == nullptr ? WorkerId(num) : w->info.id(), " is ",
          lost ? "lost" : "busy");
      d.worker_nums.clear();
      return d;
    }
  }
  d.action = RecoveryAction::kRestart;
  d.reason = absl::StrCat(
      "coordinator restarted; restarting on the same workers with epoch ",
      job.job.epoch() + 1);
  return d;
}

}  // namespace coordinator
}  // namespace pshard
