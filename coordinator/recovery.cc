#include "coordinator/recovery.h"

#include <memory>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "coordinator/ids.h"
#include "shard/layout.h"

namespace pshard {
namespace coordinator {

std::vector<std::pair<JobRec*, std::string>> RestoreSnapshot(
    StateStore::Snapshot snap, absl::Time now, WorkerRegistry& workers,
    JobTable& jobs) {
  for (auto& [num, info] : snap.workers) {
    workers.Restore(num, std::move(info), now);
  }
  std::vector<std::pair<JobRec*, std::string>> broken_jobs;
  for (auto& [num, job] : snap.jobs) {
    JobRec& j = jobs.Restore(num, std::move(job));
    j.log.Restore(std::move(snap.events[num]));
    auto a = snap.assignments.find(num);
    if (a != snap.assignments.end()) {
      j.assignment =
          std::make_shared<const v1::ShardAssignment>(std::move(a->second));
      j.assignment_owners = std::make_shared<const v1::ShardAssignment>(
          shard::OwnersView(*j.assignment));
    }
    const v1::JobState state = j.job.state();
    if (!IsActive(state)) continue;
    j.recovering = true;
    const std::set<int>& finished = snap.finished_ranks[num];
    std::string broken;
    for (const v1::JobMember& m : j.job.members()) {
      RankRec r;
      std::optional<int64_t> wnum = ParseWorkerId(m.worker_id());
      if (!wnum || workers.Find(*wnum) == nullptr) {
        broken = absl::StrCat("rank ", m.rank(), " names unknown worker ",
                              Clip(m.worker_id(), 64));
      } else {
        r.worker_num = *wnum;
      }
      r.finished = finished.count(m.rank()) > 0;
      j.finished_ranks += r.finished ? 1 : 0;
      j.ranks.push_back(r);
    }
    // A RUNNING job's layout was checked before the restart.
    j.layout.Reset(static_cast<int>(j.ranks.size()),
                   /*all_reported=*/state == v1::RUNNING);
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
