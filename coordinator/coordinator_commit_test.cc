// Commit or nothing (locked_section.h): for each mutating method, a call
// whose write the store refuses answers Unavailable with the store's error
// and leaves everything a client can read exactly as it was, in memory and
// after a restart on the same file; what it would have sent (directives,
// wait answers) is not sent.
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "coordinator/coordinator_test_fixture.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

constexpr char kFull[] = "database or disk is full";

class CommitOrNothingTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    path_ = TempPath("commit.db");
    faults_ = OpenWithFaults(path_);
    ASSERT_NE(faults_, nullptr);
  }

  // Everything a client can read: jobs with their events and assignment,
  // and workers (the fake clock stands still, so heartbeat ages match).
  std::string Observe() {
    std::string out;
    auto jobs = c_->ListJobs({}, 1000, "");
    EXPECT_OK(jobs);
    if (!jobs.ok()) return out;
    for (const v1::Job& job : jobs->jobs) {
      absl::StrAppend(&out, job.DebugString());
      for (const v1::JobEvent& e : Events(job.id())) {
        absl::StrAppend(&out, e.DebugString());
      }
      auto a = c_->GetShardAssignment(job.id());
      absl::StrAppend(&out, a.ok() ? a->DebugString() : "no assignment\n");
    }
    for (const v1::WorkerInfo& w : Workers(true)) {
      absl::StrAppend(&out, w.DebugString());
    }
    return out;
  }

  void Refuse() { faults_->FailCommits(-1, absl::InternalError(kFull)); }

  // A restart on the same file (with a fresh, unarmed fault store).
  void Restart() {
    faults_ = OpenWithFaults(path_);
    ASSERT_NE(faults_, nullptr);
  }

  // Refuses every write, runs `call`, and expects it refused with state as
  // it was before, in memory and after a restart. The store is healed and
  // the coordinator restarted when it returns.
  void ExpectRefusedChangesNothing(const std::function<absl::Status()>& call) {
    const std::string before = Observe();
    Refuse();
    EXPECT_THAT(call(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr(kFull)));
    EXPECT_EQ(Observe(), before) << "memory changed by a refused call";
    EXPECT_OK(StoreHealthOf(false));
    Restart();
    EXPECT_EQ(Observe(), before) << "the store changed by a refused call";
  }

  // OK when the coordinator's store health is `healthy`.
  absl::Status StoreHealthOf(bool healthy) {
    if (c_->StoreHealth().ok() == healthy) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("StoreHealth is ",
                                            c_->StoreHealth().ToString()));
  }

  // A two-rank job RUNNING on `a` and `b`.
  v1::Job RunningJob(const Worker& a, const Worker& b) {
    v1::Job job = StartJobOn(a, b);
    PublishLayout(job, {4, 4});
    return GetJob(job.id());
  }

  std::string path_;
  FaultStateStore* faults_ = nullptr;
};

TEST_F(CommitOrNothingTest, ARefusedSubmissionIsNotShownScheduledOrItsIdReused) {
  Worker a = Register("a");
  Worker b = Register("b");
  ExpectRefusedChangesNothing([&] { return c_->SubmitJob(Spec(2)).status(); });
  EXPECT_THAT(c_->GetJob("job-1"),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  // In the process that refused it, its id is not handed out again.
  faults_->FailCommits(1, absl::InternalError(kFull));
  EXPECT_THAT(c_->SubmitJob(Spec(2)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(kFull)));
  for (const Worker* w : {&a, &b}) {
    ASSERT_OK_AND_ASSIGN(auto resp, Beat(*w));
    EXPECT_THAT(resp.directives(), SizeIs(0));  // never told to run it
  }
  ASSERT_OK_AND_ASSIGN(v1::Job next, c_->SubmitJob(Spec(2)));
  EXPECT_EQ(next.id(), "job-2");
  EXPECT_THAT(c_->GetJob("job-1"),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_EQ(StartRank(a).job_id(), "job-2");
}

TEST_F(CommitOrNothingTest, ARefusedCancelFreesNoWorkerAndAbortsNoRank) {
  Worker a = Register("a");
  Worker b = Register("b");
  const v1::Job job = RunningJob(a, b);
  ASSERT_OK_AND_ASSIGN(v1::Job queued, c_->SubmitJob(Spec(2)));
  ASSERT_EQ(queued.state(), v1::QUEUED);
  const std::string before = Observe();
  Refuse();
  EXPECT_THAT(c_->CancelJob(job.id(), "stop"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(kFull)));
  EXPECT_EQ(Observe(), before);
  EXPECT_EQ(StateOf(a.id), v1::BUSY);
  EXPECT_EQ(GetJob(queued.id()).state(), v1::QUEUED);
  // The ranks go on: no AbortJob, and the job continues at its epoch once
  // both report it (nothing is restarted).
  for (const Worker* w : {&a, &b}) {
    ASSERT_OK_AND_ASSIGN(auto resp, Beat(*w, v1::BUSY, job.id(), job.epoch()));
    EXPECT_FALSE(HasAbort(resp, job.id()));
    EXPECT_THAT(resp.directives(), SizeIs(0));
  }
  faults_->Heal();
  c_->Tick();
  EXPECT_EQ(Observe(), before);
  EXPECT_EQ(GetJob(job.id()).epoch(), job.epoch());
  Restart();
  EXPECT_EQ(Observe(), before);
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);
}

TEST_F(CommitOrNothingTest, ARefusedRegistrationLeavesNoWorker) {
  Worker a = Register("a");
  v1::RegisterWorkerRequest req;
  req.set_name("b");
  req.set_incarnation("inc-1");
  req.set_device_kind(v1::CPU);
  ExpectRefusedChangesNothing([&] { return c_->RegisterWorker(req).status(); });
  EXPECT_THAT(Workers(true), SizeIs(1));
  EXPECT_THAT(c_->GetWorker("b"),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(CommitOrNothingTest, ARefusedReRegistrationKeepsTheOldMembershipAndJob) {
  Worker a = Register("a");
  Worker b = Register("b");
  const v1::Job job = RunningJob(a, b);
  v1::RegisterWorkerRequest req;
  req.set_name("a");
  req.set_incarnation("inc-2");  // the process restarted
  req.set_host("h1");
  req.set_address("h1:7071");
  req.set_device_kind(v1::CPU);
  ExpectRefusedChangesNothing([&] { return c_->RegisterWorker(req).status(); });
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);
  EXPECT_EQ(GetJob(job.id()).epoch(), job.epoch());
}

TEST_F(CommitOrNothingTest, ARefusedHeartbeatStateChangeIsNotKept) {
  Worker a = Register("a");
  ExpectRefusedChangesNothing(
      [&] { return Beat(a, v1::DRAINING).status(); });
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo info, c_->GetWorker(a.id));
  EXPECT_FALSE(info.drain_requested());
}

TEST_F(CommitOrNothingTest, ARefusedDrainOrUndrainIsNotKept) {
  Worker a = Register("a");
  ExpectRefusedChangesNothing([&] { return c_->DrainWorker("a").status(); });
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
  ASSERT_OK(c_->DrainWorker("a"));
  ExpectRefusedChangesNothing([&] { return c_->UndrainWorker("a").status(); });
  EXPECT_EQ(StateOf(a.id), v1::DRAINING);
}

TEST_F(CommitOrNothingTest, ARefusedResultIsNotKeptAndItsRetryFinishesTheJob) {
  Worker a = Register("a");
  Worker b = Register("b");
  const v1::Job job = RunningJob(a, b);
  ASSERT_OK(Result(job, 0, true));
  ExpectRefusedChangesNothing([&] { return Result(job, 1, true); });
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);
  // The worker retries (item 2): the restarted coordinator takes it.
  ASSERT_OK(Beat(b, v1::BUSY, job.id(), job.epoch()));
  ASSERT_OK(Result(job, 1, true));
  EXPECT_EQ(GetJob(job.id()).state(), v1::SUCCEEDED);
}

TEST_F(CommitOrNothingTest, ARefusedAsyncResultAnswersUnavailable) {
  Worker a = Register("a");
  Worker b = Register("b");
  const v1::Job job = RunningJob(a, b);
  ExpectRefusedChangesNothing([&] {
    StatusCapture done;
    c_->ReportResultAsync(ResultRequest(job, 0, true), done.Callback());
    EXPECT_TRUE(c_->WaitForNotifier(absl::Seconds(30)));
    return done.result.value_or(absl::InternalError("not answered"));
  });
}

TEST_F(CommitOrNothingTest, ARefusedFailureReportNeitherFailsNorRestartsTheJob) {
  Worker a = Register("a");
  Worker b = Register("b");
  const v1::Job job = RunningJob(a, b);
  ExpectRefusedChangesNothing(
      [&] { return Result(job, 1, false, "out of memory"); });
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);
}

// The last layout publishes the assignment; refused, no waiting rank gets
// it (they get the store's error) and the job has none.
TEST_F(CommitOrNothingTest, ARefusedPublicationIsNotSentToWaitingRanks) {
  Worker a = Register("a");
  Worker b = Register("b");
  const v1::Job job = StartJobOn(a, b);
  ASSERT_OK(c_->ReportBuckets(Buckets(job, 0, {4, 4})));
  Capture<AssignmentPtr> waiting;
  c_->GetAssignment(job.id(), job.epoch(), v1::ASSIGNMENT_VIEW_FULL,
                    clock_.Now() + absl::Seconds(60), waiting.Callback());
  ASSERT_FALSE(waiting.result.has_value());
  const std::string before = Observe();
  Refuse();
  EXPECT_THAT(c_->ReportBuckets(Buckets(job, 1, {4, 4})),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(kFull)));
  ASSERT_TRUE(waiting.result.has_value());
  EXPECT_THAT(*waiting.result,
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(kFull)));
  EXPECT_EQ(Observe(), before);
  EXPECT_THAT(c_->GetShardAssignment(job.id()),
              StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
  Restart();
  EXPECT_EQ(Observe(), before);
}

TEST_F(CommitOrNothingTest, ARefusedProgressEventIsNotKept) {
  Worker a = Register("a");
  Worker b = Register("b");
  const v1::Job job = RunningJob(a, b);
  v1::ReportProgressRequest req;
  req.set_job_id(job.id());
  req.set_epoch(job.epoch());
  req.set_rank(0);
  req.set_worker_id(job.members(0).worker_id());
  req.mutable_progress()->set_step(job.spec().steps());  // the last: flushed
  ExpectRefusedChangesNothing([&] { return c_->ReportProgress(req).status(); });
  EXPECT_EQ(GetJob(job.id()).progress().step(), 0);
}

// A loss is a fact, not a request: the refused write is undone, and the
// loss is applied again and committed once the store can.
TEST_F(CommitOrNothingTest, ARefusedLossIsUndoneThenCommittedWhenTheStoreCan) {
  Worker a = Register("a");
  Worker b = Register("b");
  const v1::Job job = RunningJob(a, b);
  v1::AttachRequest attach;
  attach.set_worker_id(a.id);
  attach.set_incarnation(a.incarnation);
  ASSERT_OK_AND_ASSIGN(int64_t attachment, c_->AttachWorker(attach));
  const StateStore::Snapshot durable = faults_->committed();
  Refuse();
  EXPECT_THAT(c_->WorkerDetached(a.id, a.incarnation, attachment),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(kFull)));
  c_->Tick();  // its second try is refused too
  EXPECT_EQ(faults_->committed().jobs.at(1).DebugString(),
            durable.jobs.at(1).DebugString());
  faults_->Heal();
  c_->Tick();
  EXPECT_EQ(StateOf(a.id), v1::LOST);
  const v1::Job failed = GetJob(job.id());
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_THAT(failed.reason(), HasSubstr("lost"));
  EXPECT_EQ(faults_->committed().jobs.at(1).state(), v1::FAILED);
  Restart();
  EXPECT_EQ(GetJob(job.id()).state(), v1::FAILED);
}

TEST_F(CommitOrNothingTest, ARefusedCheckpointShardIsNotRecorded) {
  Worker a = Register("a");
  v1::JobSpec spec = Spec(1);
  spec.mutable_checkpoint()->set_dir(::pshard::testing::MakeTempDir("ckpt"));
  spec.mutable_checkpoint()->set_every_steps(10);
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(spec));
  StartRank(a);
  job = GetJob(job.id());
  PublishLayout(job, {4});
  v1::ReportCheckpointRequest req;
  req.set_job_id(job.id());
  req.set_epoch(job.epoch());
  req.set_rank(0);
  req.set_worker_id(job.members(0).worker_id());
  req.set_step(10);
  req.set_ok(false);
  req.set_error("disk full on the worker");
  ExpectRefusedChangesNothing(
      [&] { return c_->ReportCheckpoint(req).status(); });
  EXPECT_THAT(GetJob(job.id()).checkpoints(), SizeIs(0));
}

// Group commit: a change sealed while an earlier one is being written rests
// on it; when that write fails, both callers are refused and both changes
// are undone.
TEST_F(CommitOrNothingTest, EveryChangeOfAFailedGroupIsRefusedAndUndone) {
  Worker a = Register("a");
  Worker b = Register("b");
  const v1::Job job = RunningJob(a, b);
  const std::string before = Observe();
  faults_->Hold();  // the result's write waits, as on a slow disk
  StatusCapture result;
  c_->ReportResultAsync(ResultRequest(job, 0, true), result.Callback());
  Refuse();
  absl::Status cancelled;
  std::thread cancel([&] { cancelled = c_->CancelJob(job.id(), "").status(); });
  faults_->Release();
  cancel.join();
  ASSERT_TRUE(c_->WaitForNotifier(absl::Seconds(30)));
  ASSERT_TRUE(result.result.has_value());
  EXPECT_THAT(*result.result,
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(kFull)));
  EXPECT_THAT(cancelled, StatusIs(absl::StatusCode::kUnavailable, HasSubstr(kFull)));
  EXPECT_EQ(Observe(), before);
  Restart();
  EXPECT_EQ(Observe(), before);
}

// A RunJob for a job whose submission is still being written waits for
// that write; when it fails, the heartbeat is refused and no worker is
// told to run a job that does not exist.
TEST_F(CommitOrNothingTest, NoRunJobIsSentForASubmissionThatDidNotCommit) {
  Worker a = Register("a");
  ASSERT_OK(Beat(a));
  faults_->Hold();
  absl::Status submitted;
  std::thread submit([&] { submitted = c_->SubmitJob(Spec(1)).status(); });
  // The submission is sealed (and its write held) once a's rank is taken.
  ASSERT_TRUE(::pshard::testing::WaitUntil(
      [&] { return StateOf(a.id) == v1::BUSY; }, absl::Seconds(30)));
  Refuse();
  absl::StatusOr<v1::HeartbeatResponse> beat;
  std::thread heartbeat([&] { beat = Beat(a); });
  faults_->Release();
  submit.join();
  heartbeat.join();
  EXPECT_THAT(submitted, StatusIs(absl::StatusCode::kUnavailable, HasSubstr(kFull)));
  // Refused if it waited for the failed write; else it came after the
  // rollback and has nothing to run. Either way: no RunJob.
  if (beat.ok()) {
    EXPECT_THAT(beat->directives(), SizeIs(0));
  } else {
    EXPECT_THAT(beat.status(),
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr(kFull)));
  }
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
  faults_->Heal();
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(a));
  EXPECT_THAT(resp.directives(), SizeIs(0));
}

TEST_F(CommitOrNothingTest, StoreHealthFollowsTheStoreWithoutAClientChange) {
  Register("a");
  EXPECT_OK(StoreHealthOf(true));
  Refuse();
  EXPECT_THAT(c_->DrainWorker("a"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(kFull)));
  EXPECT_THAT(c_->StoreHealth(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr(kFull)));
  c_->Tick();  // the probe still fails
  EXPECT_OK(StoreHealthOf(false));
  faults_->Heal();
  c_->Tick();  // nothing to write; the probe commits
  EXPECT_OK(StoreHealthOf(true));
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
