#include "coordinator/recovery.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "coordinator/ids.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

class RecoveryTest : public ::testing::Test {
 protected:
  void AddWorker(int64_t num) {
    v1::WorkerInfo info;
    info.set_id(WorkerId(num));
    info.set_name(absl::StrCat("n", num));
    snap_.workers[num] = info;
  }
  // A job `num` in `state` at epoch 3 on workers "w-<member>".
  void AddJob(int64_t num, v1::JobState state,
              std::vector<std::string> members) {
    v1::Job job;
    job.set_id(JobId(num));
    job.set_state(state);
    job.set_epoch(3);
    for (size_t r = 0; r < members.size(); ++r) {
      v1::JobMember* m = job.add_members();
      m->set_rank(static_cast<int>(r));
      m->set_worker_id(members[r]);
    }
    snap_.jobs[num] = job;
    snap_.events[num].resize(2);
  }
  std::vector<std::pair<JobRec*, std::string>> Restore() {
    return RestoreSnapshot(std::move(snap_), kT0, workers_, jobs_);
  }
  // A heartbeat as the coordinator records it.
  void Heard(int64_t num, bool reports_assignment) {
    WorkerRec* w = workers_.Find(num);
    w->heartbeated = true;
    w->confirmed = true;
    w->reports_assignment = reports_assignment;
  }

  StateStore::Snapshot snap_;
  WorkerRegistry workers_{{}, kT0};
  JobTable jobs_{{}};
};

TEST_F(RecoveryTest, RestoreAttachesUnfinishedRanksAndMarksActiveJobs) {
  AddWorker(1);
  AddWorker(2);
  AddJob(5, v1::RUNNING, {"w-1", "w-2"});
  AddJob(6, v1::QUEUED, {});
  snap_.finished_ranks[5] = {1};
  EXPECT_THAT(Restore(), IsEmpty());
  JobRec* j = jobs_.Find(5);
  ASSERT_NE(j, nullptr);
  EXPECT_TRUE(j->recovering);
  EXPECT_EQ(j->finished_ranks, 1);
  EXPECT_EQ(j->log.size(), 2);
  EXPECT_TRUE(j->layout.complete());  // RUNNING: checked before
  EXPECT_THAT(jobs_.ActiveJobs(), ElementsAre(5));
  const WorkerRec* w1 = workers_.Find(1);
  EXPECT_TRUE(w1->Holds(5, 3));
  EXPECT_EQ(w1->rank, 0);
  EXPECT_TRUE(w1->acknowledged);
  EXPECT_FALSE(w1->confirmed);
  EXPECT_EQ(workers_.Find(2)->job_num, 0);  // rank 1 finished
  EXPECT_FALSE(jobs_.Find(6)->recovering);
}

TEST_F(RecoveryTest, AJobNamingAnUnknownWorkerIsReportedBroken) {
  AddWorker(1);
  AddJob(5, v1::STARTING, {"w-1", "w-9"});
  auto broken = Restore();
  ASSERT_THAT(broken, SizeIs(1));
  EXPECT_EQ(broken[0].first->num, 5);
  EXPECT_THAT(broken[0].second,
              HasSubstr("state database inconsistent after restart: rank 1 "
                        "names unknown worker w-9"));
  EXPECT_EQ(workers_.Find(1)->job_num, 0);
}

TEST_F(RecoveryTest, WaitsForEveryRankThenContinuesARunningJob) {
  AddWorker(1);
  AddWorker(2);
  AddJob(5, v1::RUNNING, {"w-1", "w-2"});
  Restore();
  const JobRec& j = *jobs_.Find(5);
  Heard(1, true);
  EXPECT_EQ(DecideRecovery(j, workers_).action, RecoveryAction::kWait);
  Heard(2, true);
  EXPECT_EQ(DecideRecovery(j, workers_).action, RecoveryAction::kContinue);
}

TEST_F(RecoveryTest, RestartsOnTheSameWorkersWhenARankCannotContinue) {
  AddWorker(1);
  AddWorker(2);
  AddJob(5, v1::STARTING, {"w-1", "w-2"});
  Restore();
  Heard(1, true);
  Heard(2, true);
  RecoveryDecision d = DecideRecovery(*jobs_.Find(5), workers_);
  EXPECT_EQ(d.action, RecoveryAction::kRestart);
  EXPECT_THAT(d.worker_nums, ElementsAre(1, 2));
  EXPECT_THAT(d.reason, HasSubstr("with epoch 4"));
}

TEST_F(RecoveryTest, FailsWhenAFinishedRanksWorkerIsLostOrBusy) {
  AddWorker(1);
  AddWorker(2);
  AddJob(5, v1::RUNNING, {"w-1", "w-2"});
  snap_.finished_ranks[5] = {1};
  Restore();
  Heard(1, false);
  workers_.Find(2)->Assign(8, 1, 0);
  RecoveryDecision d = DecideRecovery(*jobs_.Find(5), workers_);
  EXPECT_EQ(d.action, RecoveryAction::kFail);
  EXPECT_THAT(d.reason, HasSubstr("worker w-2 is busy"));
  workers_.Find(2)->Release();
  workers_.Find(2)->lost = true;
  d = DecideRecovery(*jobs_.Find(5), workers_);
  EXPECT_EQ(d.action, RecoveryAction::kFail);
  EXPECT_THAT(d.reason, HasSubstr("worker w-2 is lost"));
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
