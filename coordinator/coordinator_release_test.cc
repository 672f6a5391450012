// A worker returns to the pool only when it is free (issue 17, item 3): a
// rank the coordinator takes back (cancel, failure, restart) leaves its
// worker RELEASING until the worker says it stopped (a heartbeat without
// that job and epoch, or a ReportResult for it) or is LOST; a worker whose
// heartbeat is late is not scheduled either. On the FakeClock, heartbeats
// driven by hand.
#include "coordinator/coordinator_test_fixture.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::HasSubstr;

class CoordinatorReleaseTest : public CoordinatorTest {
 protected:
  v1::WorkerInfo Info(const Worker& w) {
    auto info = c_->GetWorker(w.id);
    EXPECT_OK(info);
    return info.ok() ? *info : v1::WorkerInfo();
  }

  // A second later, `w` heartbeats that it still runs (job, epoch).
  absl::StatusOr<v1::HeartbeatResponse> StillRunning(const Worker& w,
                                                     const v1::Job& job) {
    clock_.Advance(absl::Seconds(1));
    c_->Tick();
    return Beat(w, v1::BUSY, job.id(), job.epoch());
  }

  static int RunJobs(const v1::HeartbeatResponse& resp) {
    int n = 0;
    for (const auto& d : resp.directives()) n += d.has_run_job() ? 1 : 0;
    return n;
  }
};

// The case: after a cancel, workers inside an 18 s compute step get
// no new job until they stop; the next job then starts and runs.
TEST_F(CoordinatorReleaseTest, NextJobWaitsUntilTheCancelledRanksStop) {
  const Worker a = Register("a");
  const Worker b = Register("b");
  const v1::Job first = StartRunning(Spec(2), a, b);
  ASSERT_EQ(first.state(), v1::RUNNING);
  ASSERT_OK(c_->CancelJob(first.id(), "user"));
  EXPECT_EQ(StateOf(a.id), v1::RELEASING);
  const v1::WorkerInfo releasing = Info(b);
  EXPECT_EQ(releasing.job_id(), first.id());  // what it is finishing
  EXPECT_EQ(releasing.rank(), 1);
  ASSERT_OK_AND_ASSIGN(const v1::Job second, c_->SubmitJob(Spec(2)));

  for (int s = 0; s < 18; ++s) {  // 18 heartbeats inside the step
    ASSERT_OK_AND_ASSIGN(auto ra, StillRunning(a, first));
    ASSERT_OK_AND_ASSIGN(auto rb, Beat(b, v1::BUSY, first.id(), first.epoch()));
    EXPECT_TRUE(HasAbort(ra, first.id()));
    EXPECT_EQ(RunJobs(ra) + RunJobs(rb), 0) << "heartbeat " << s;
  }
  EXPECT_EQ(GetJob(second.id()).state(), v1::QUEUED);
  EXPECT_EQ(StateOf(a.id), v1::RELEASING);

  // a's step ends: it goes IDLE; b reports its aborted rank's result.
  ASSERT_OK(Beat(a));
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
  EXPECT_EQ(GetJob(second.id()).state(), v1::QUEUED);  // b is not free yet
  ASSERT_OK(Result(first, 1, false, "aborted by the coordinator"));
  EXPECT_EQ(GetJob(first.id()).state(), v1::CANCELLED);  // unchanged
  const v1::Job started = GetJob(second.id());
  ASSERT_EQ(started.state(), v1::STARTING);
  StartRank(a);
  StartRank(b);
  PublishLayout(started, {10});
  ASSERT_OK(Result(started, 0, true));
  ASSERT_OK(Result(started, 1, true));
  EXPECT_EQ(GetJob(second.id()).state(), v1::SUCCEEDED);
}

TEST_F(CoordinatorReleaseTest, ASpareRunsTheNextJobWhileTheOthersFinish) {
  const Worker a = Register("a");
  const Worker b = Register("b");
  const v1::Job first = StartRunning(Spec(2), a, b);
  const Worker spare = Register("c");
  ASSERT_OK(c_->CancelJob(first.id(), ""));
  ASSERT_OK_AND_ASSIGN(const v1::Job second, c_->SubmitJob(Spec(1)));
  const v1::Job placed = GetJob(second.id());
  ASSERT_EQ(placed.state(), v1::STARTING);
  ASSERT_EQ(placed.members_size(), 1);
  EXPECT_EQ(placed.members(0).worker_id(), spare.id);
}

TEST_F(CoordinatorReleaseTest, AWorkerNeverToldToRunItsRankIsFreeAtOnce) {
  const Worker a = Register("a");
  ASSERT_OK_AND_ASSIGN(const v1::Job job, c_->SubmitJob(Spec(1)));
  ASSERT_EQ(StateOf(a.id), v1::BUSY);  // assigned; no heartbeat took RunJob
  ASSERT_OK(c_->CancelJob(job.id(), ""));
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
}

// A frozen worker never says it stopped: the heartbeat timeout makes it
// LOST, and the queue moves on without it.
TEST_F(CoordinatorReleaseTest, AFrozenReleasingWorkerIsLostAndTheQueueMovesOn) {
  const Worker a = Register("a");
  const Worker b = Register("b");
  const v1::Job first = StartRunning(Spec(2), a, b);
  ASSERT_OK(c_->CancelJob(first.id(), ""));
  ASSERT_OK_AND_ASSIGN(const v1::Job second, c_->SubmitJob(Spec(2)));
  for (int s = 0; s < 6; ++s) {  // b is frozen: only a beats, and stops
    clock_.Advance(absl::Seconds(1));
    ASSERT_OK(Beat(a));
    c_->Tick();
  }
  EXPECT_EQ(StateOf(b.id), v1::LOST);
  EXPECT_EQ(GetJob(second.id()).state(), v1::QUEUED);
  const Worker c = Register("c");
  const v1::Job started = GetJob(second.id());
  ASSERT_EQ(started.state(), v1::STARTING);
  EXPECT_EQ(started.members(0).worker_id(), a.id);
  EXPECT_EQ(started.members(1).worker_id(), c.id);
}

TEST_F(CoordinatorReleaseTest, AWorkerWhoseHeartbeatIsLateIsNotScheduled) {
  const Worker a = Register("a");
  // worker_timeout 5 s: late after 2.5 s, lost after 5 s.
  clock_.Advance(absl::Seconds(3));
  c_->Tick();
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
  ASSERT_OK_AND_ASSIGN(const v1::Job job, c_->SubmitJob(Spec(1)));
  EXPECT_EQ(GetJob(job.id()).state(), v1::QUEUED);
  ASSERT_OK(Beat(a));  // on time again: scheduled at once
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
}

TEST_F(CoordinatorReleaseTest, ADrainedWorkerShowsTheJobItFinishesUntilItStops) {
  const Worker a = Register("a");
  const Worker b = Register("b");
  const v1::Job job = StartRunning(Spec(2), a, b);
  ASSERT_OK(c_->DrainWorker(a.id));
  ASSERT_OK(c_->CancelJob(job.id(), ""));
  v1::WorkerInfo info = Info(a);
  EXPECT_EQ(info.state(), v1::DRAINING);
  EXPECT_EQ(info.job_id(), job.id());  // `drain --wait` keeps waiting
  ASSERT_OK(Beat(a, v1::DRAINING, job.id(), job.epoch()));
  EXPECT_EQ(Info(a).job_id(), job.id());
  ASSERT_OK(Beat(a, v1::DRAINING));
  info = Info(a);
  EXPECT_EQ(info.state(), v1::DRAINING);
  EXPECT_EQ(info.job_id(), "");
  ASSERT_OK(c_->UndrainWorker(a.id));
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
}

// A restart takes its surviving member back at once; the member runs the
// new epoch once it has stopped the old one, and the RunJob directives it
// gets meanwhile do not count against it.
TEST_F(CoordinatorReleaseTest, ARestartWaitsForItsSurvivorToStopTheOldEpoch) {
  const Worker a = Register("a");
  const Worker b = Register("b");
  const Worker spare = Register("c");
  v1::JobSpec spec = Spec(2);
  spec.set_max_restarts(1);
  const v1::Job old = StartRunning(spec, a, b);
  ASSERT_OK_AND_ASSIGN(const int64_t attachment, Attach(b));
  ASSERT_OK(Detach(b, attachment));  // b died
  const v1::Job restarted = GetJob(old.id());
  ASSERT_EQ(restarted.state(), v1::STARTING);
  ASSERT_EQ(restarted.epoch(), old.epoch() + 1);
  ASSERT_EQ(restarted.members_size(), 2);
  EXPECT_EQ(restarted.members(0).worker_id(), a.id);
  EXPECT_EQ(restarted.members(1).worker_id(), spare.id);
  StartRank(spare);

  const int sends = options_.max_unacknowledged_run_jobs + 5;
  for (int s = 0; s < sends; ++s) {  // a is inside the old epoch's step
    ASSERT_OK_AND_ASSIGN(auto resp, StillRunning(a, old));
    ASSERT_OK(Beat(spare, v1::BUSY, restarted.id(), restarted.epoch()));
    EXPECT_TRUE(HasAbort(resp, old.id()));
    EXPECT_EQ(RunJobs(resp), 1);  // the new epoch, queued by the agent
  }
  EXPECT_EQ(GetJob(old.id()).state(), v1::STARTING);
  ASSERT_OK(Beat(a, v1::BUSY, restarted.id(), restarted.epoch()));
  EXPECT_EQ(StateOf(a.id), v1::BUSY);
  PublishLayout(restarted, {10});
  EXPECT_EQ(GetJob(old.id()).state(), v1::RUNNING);
}

// A worker that stays silent about the new epoch once it has stopped the
// old one is counted again.
TEST_F(CoordinatorReleaseTest, UnacknowledgedRunJobsCountOnceTheOldEpochStops) {
  const Worker a = Register("a");
  const Worker b = Register("b");
  const v1::Job first = StartRunning(Spec(2), a, b);
  ASSERT_OK(c_->CancelJob(first.id(), ""));
  ASSERT_OK(Beat(a));
  ASSERT_OK(Beat(b));
  ASSERT_OK_AND_ASSIGN(const v1::Job second, c_->SubmitJob(Spec(2)));
  ASSERT_EQ(GetJob(second.id()).state(), v1::STARTING);
  StartRank(b);
  for (int s = 0; s <= options_.max_unacknowledged_run_jobs; ++s) {
    ASSERT_OK(Beat(a));  // IDLE: it ignores the RunJob
  }
  const v1::Job failed = GetJob(second.id());
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_THAT(failed.reason(), HasSubstr("did not start the job"));
}

// After a coordinator restart nothing says which workers were RELEASING:
// their heartbeats do (a job and epoch they do not hold).
TEST_F(CoordinatorReleaseTest, AfterACoordinatorRestartHeartbeatsTellWhoIsBusy) {
  const std::string path = TempPath("release.db");
  Open(path);
  const Worker a = Register("a");
  const Worker b = Register("b");
  const v1::Job first = StartRunning(Spec(2), a, b);
  ASSERT_OK(c_->CancelJob(first.id(), ""));
  ASSERT_OK_AND_ASSIGN(const v1::Job second, c_->SubmitJob(Spec(2)));
  Open(path);  // "kill and restart"
  ASSERT_OK(Beat(b));
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(a, v1::BUSY, first.id(), first.epoch()));
  EXPECT_TRUE(HasAbort(resp, first.id()));
  const v1::WorkerInfo info = Info(a);
  EXPECT_EQ(info.state(), v1::RELEASING);
  EXPECT_EQ(info.job_id(), first.id());
  EXPECT_EQ(GetJob(second.id()).state(), v1::QUEUED);
  ASSERT_OK(Beat(a));
  EXPECT_EQ(GetJob(second.id()).state(), v1::STARTING);
}

TEST_F(CoordinatorReleaseTest, ARestartedWorkerProcessIsFreeAtOnce) {
  const Worker a = Register("a");
  const Worker b = Register("b");
  const v1::Job job = StartRunning(Spec(2), a, b);
  ASSERT_OK(c_->CancelJob(job.id(), ""));
  ASSERT_EQ(StateOf(a.id), v1::RELEASING);
  Register("a", "h1", "inc-2");  // the process restarted: it runs nothing
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
  EXPECT_EQ(Info(a).job_id(), "");
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
