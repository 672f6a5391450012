// Coordinator facade tests: a new coordinator on the same store: what continues, restarts or fails.
#include "coordinator/coordinator_test_fixture.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

TEST_F(CoordinatorTest, RestartKeepsEverythingAndRunningJobsContinue) {
  const std::string path = TempPath("restart.db");
  Open(path);
  Worker a = Register("a");
  Worker b = Register("b");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(2)));
  ASSERT_OK_AND_ASSIGN(v1::Job queued, c_->SubmitJob(Spec(5)));
  job = GetJob(job.id());
  StartRank(a);
  StartRank(b);
  PublishLayout(job, {4, 4});
  const auto events_before = Events(job.id());
  ASSERT_OK_AND_ASSIGN(auto assignment_before, c_->GetShardAssignment(job.id()));

  clock_.Advance(absl::Seconds(3));
  Open(path);  // "kill and restart"
  EXPECT_EQ(GetJob(queued.id()).state(), v1::QUEUED);
  v1::Job after = GetJob(job.id());
  EXPECT_EQ(after.state(), v1::RUNNING);
  EXPECT_EQ(after.epoch(), 1);
  EXPECT_EQ(Events(job.id()).size(), events_before.size());
  ASSERT_OK_AND_ASSIGN(auto assignment_after, c_->GetShardAssignment(job.id()));
  EXPECT_EQ(assignment_after.SerializeAsString(), assignment_before.SerializeAsString());
  // Same incarnation: heartbeats are accepted without re-registering.
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(a, v1::BUSY, job.id(), 1));
  EXPECT_THAT(resp.directives(), SizeIs(0));
  EXPECT_EQ(Register("b").id, b.id);  // or they register again: same id
  ASSERT_OK(Beat(b, v1::BUSY, job.id(), 1));
  clock_.Advance(absl::Seconds(20));
  ASSERT_OK(Beat(a, v1::BUSY, job.id(), 1));
  ASSERT_OK(Beat(b, v1::BUSY, job.id(), 1));
  c_->Tick();
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);
  ASSERT_OK(Result(after, 0, true));
  ASSERT_OK(Result(after, 1, true));
  EXPECT_EQ(GetJob(job.id()).state(), v1::SUCCEEDED);
  // New ids continue after the stored ones.
  EXPECT_EQ(Register("c").id, "w-3");
  ASSERT_OK_AND_ASSIGN(v1::Job next, c_->SubmitJob(Spec(1)));
  EXPECT_EQ(next.id(), "job-3");
}

TEST_F(CoordinatorTest, RestartRestartsAStartingJobWithANewEpoch) {
  const std::string path = TempPath("restart-starting.db");
  Open(path);
  Worker a = Register("a");
  Worker b = Register("b");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(2)));
  StartRank(a);
  StartRank(b);
  Open(path);
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
  ASSERT_OK(Beat(a, v1::BUSY, job.id(), 1));
  EXPECT_EQ(GetJob(job.id()).epoch(), 1);  // b is not back yet
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(b, v1::BUSY, job.id(), 1));
  v1::Job after = GetJob(job.id());
  EXPECT_EQ(after.state(), v1::STARTING);
  EXPECT_EQ(after.epoch(), 2);
  EXPECT_THAT(after.reason(), HasSubstr("coordinator restarted"));
  bool run = false;
  for (const auto& d : resp.directives()) run |= d.has_run_job() && d.run_job().epoch() == 2;
  EXPECT_TRUE(run);
  EXPECT_TRUE(HasAbort(resp, job.id()));  // the old epoch
}

TEST_F(CoordinatorTest, RestartFailsAJobWhoseWorkersDoNotComeBack) {
  const std::string path = TempPath("restart-lost.db");
  Open(path);
  Worker a = Register("a");
  Worker b = Register("b");
  v1::Job job = StartJobOn(a, b);
  PublishLayout(job, {1, 2});
  Open(path);
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_OK(Beat(a, v1::BUSY, job.id(), 1));
    c_->Tick();
    ASSERT_EQ(GetJob(job.id()).state(), v1::RUNNING) << i;  // grace: 10 s
  }
  clock_.Advance(absl::Seconds(1));
  ASSERT_OK(Beat(a, v1::BUSY, job.id(), 1));
  c_->Tick();
  v1::Job after = GetJob(job.id());
  EXPECT_EQ(after.state(), v1::FAILED);
  EXPECT_THAT(after.reason(), HasSubstr("worker w-2 (rank 1) lost: not back within"));
}

TEST_F(CoordinatorTest, RestartRestartsARunningJobWhoseRankStopped) {
  const std::string path = TempPath("restart-idle.db");
  Open(path);
  Worker a = Register("a");
  Worker b = Register("b");
  v1::Job job = StartJobOn(a, b);
  PublishLayout(job, {1, 2});
  Open(path);
  ASSERT_OK(Beat(a, v1::BUSY, job.id(), 1));
  ASSERT_OK(Beat(b));  // b gave up while the coordinator was away
  v1::Job after = GetJob(job.id());
  EXPECT_EQ(after.state(), v1::STARTING);
  EXPECT_EQ(after.epoch(), 2);
  Capture<Coordinator::AssignmentPtr> stale;
  c_->GetAssignment(job.id(), 1, v1::ASSIGNMENT_VIEW_FULL, clock_.Now() + absl::Seconds(1), stale.Callback());
  EXPECT_THAT(*stale.result, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("stale")));
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
