// Coordinator facade tests: submission, scheduling, the job lifecycle, cancellation, results, progress, the job listing.
#include "coordinator/coordinator_test_fixture.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

TEST_F(CoordinatorTest, SubmitValidatesTheSpec) {
  v1::JobSpec spec = Spec(2);
  spec.set_world_size(0);
  EXPECT_THAT(c_->SubmitJob(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("world_size")));
  spec = Spec(2);
  spec.clear_name();
  EXPECT_THAT(c_->SubmitJob(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name")));
  // from_checkpoint is resolved and verified: a missing one is refused, not
  // silently started from step 0 (coordinator_from_checkpoint_test).
  spec = Spec(2);
  spec.set_from_checkpoint("/nonexistent/ckpt/step-5");
  EXPECT_THAT(c_->SubmitJob(spec),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("from_checkpoint: /nonexistent/ckpt/step-5")));
  ASSERT_OK_AND_ASSIGN(auto jobs, c_->ListJobs({}, 0, ""));
  EXPECT_THAT(jobs.jobs, SizeIs(0));
}

TEST_F(CoordinatorTest, SubmitAppliesDefaultsAndQueues) {
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(2)));
  EXPECT_EQ(job.id(), "job-1");
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_EQ(job.spec().assignment_policy(), v1::JobSpec::BALANCED);
  EXPECT_EQ(job.spec().backend(), v1::JobSpec::AUTO);
  EXPECT_TRUE(job.has_submit_time());
  EXPECT_FALSE(job.has_start_time());
  EXPECT_EQ(job.progress().total_steps(), 10);
  auto events = Events(job.id());
  ASSERT_THAT(events, SizeIs(1));
  EXPECT_EQ(events[0].sequence(), 1);
  EXPECT_EQ(events[0].state_change().to(), v1::QUEUED);
}

TEST_F(CoordinatorTest, UnfinishedJobsAreCapped) {
  options_.max_unfinished_jobs = 1;
  Open(":memory:");
  ASSERT_OK(c_->SubmitJob(Spec(1)));
  EXPECT_THAT(c_->SubmitJob(Spec(1)), StatusIs(absl::StatusCode::kResourceExhausted, ::testing::_));
}

TEST_F(CoordinatorTest, FullLifecycle) {
  Worker a = Register("pod-a");
  Worker b = Register("pod-b");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(2)));
  job = GetJob(job.id());
  ASSERT_EQ(job.state(), v1::STARTING);
  EXPECT_EQ(job.epoch(), 1);
  EXPECT_TRUE(job.has_start_time());
  ASSERT_THAT(job.members(), SizeIs(2));
  EXPECT_EQ(StateOf(a.id), v1::BUSY);

  v1::RunJobDirective run_a = StartRank(a);
  v1::RunJobDirective run_b = StartRank(b);
  EXPECT_EQ(run_a.job_id(), job.id());
  EXPECT_EQ(run_a.epoch(), 1);
  EXPECT_EQ(run_a.world_size(), 2);
  EXPECT_EQ(run_a.rank() + run_b.rank(), 1);
  EXPECT_EQ(run_a.spec().assignment_policy(), v1::JobSpec::BALANCED);
  // No member list: ranks find each other through the rendezvous store.
  EXPECT_THAT(run_a.members(), SizeIs(0));
  // Acknowledged: no more RunJob.
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(a, v1::BUSY, job.id(), 1));
  EXPECT_THAT(resp.directives(), SizeIs(0));

  // Rendezvous.
  v1::KvPutRequest put;
  put.set_job_id(job.id());
  put.set_epoch(1);
  put.set_key("nccl-id");
  put.set_value("\x01\x02");
  ASSERT_OK(c_->KvPut(put));
  Capture<std::string> got;
  c_->KvGet(job.id(), 1, "nccl-id", clock_.Now() + absl::Seconds(1), got.Callback());
  ASSERT_TRUE(got.result.has_value());
  EXPECT_THAT(*got.result, IsOk());
  EXPECT_EQ(**got.result, "\x01\x02");

  // Assignment.
  Capture<Coordinator::AssignmentPtr> assignment;
  c_->GetAssignment(job.id(), 1, v1::ASSIGNMENT_VIEW_FULL, clock_.Now() + absl::Seconds(30), assignment.Callback());
  EXPECT_FALSE(assignment.result.has_value());
  EXPECT_THAT(c_->GetShardAssignment(job.id()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("0 of 2")));
  ASSERT_OK(c_->ReportBuckets(Buckets(job, 0, {100, 300, 200})));
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
  ASSERT_OK(c_->ReportBuckets(Buckets(job, 1, {100, 300, 200})));
  ASSERT_TRUE(assignment.result.has_value());
  ASSERT_OK(*assignment.result);
  EXPECT_EQ((**assignment.result)->epoch(), 1);
  EXPECT_THAT((**assignment.result)->buckets(), SizeIs(3));
  EXPECT_DOUBLE_EQ((**assignment.result)->imbalance(), 1.0);  // 1200 | 1200
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);
  ASSERT_OK_AND_ASSIGN(auto published, c_->GetShardAssignment(job.id()));
  EXPECT_EQ(published.total_bytes(), 2400);

  // Progress.
  v1::ReportProgressRequest progress;
  progress.set_job_id(job.id());
  progress.set_epoch(1);
  progress.set_rank(0);
  progress.set_worker_id(job.members(0).worker_id());
  progress.mutable_progress()->set_step(3);
  progress.mutable_progress()->set_loss(0.5);
  progress.mutable_progress()->set_bytes_sent(1234);
  ASSERT_OK_AND_ASSIGN(auto presp, c_->ReportProgress(progress));
  EXPECT_FALSE(presp.abort());
  job = GetJob(job.id());
  EXPECT_EQ(job.progress().step(), 3);
  EXPECT_EQ(job.progress().total_steps(), 10);
  EXPECT_DOUBLE_EQ(job.progress().loss(), 0.5);

  // Results.
  ASSERT_OK(Result(job, 1, true));
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);
  EXPECT_EQ(StateOf(job.members(1).worker_id()), v1::IDLE);  // released at once
  ASSERT_OK(Result(job, 1, true));  // a retry is harmless
  ASSERT_OK(Result(job, 0, true));
  job = GetJob(job.id());
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_EQ(job.progress().step(), 10);
  EXPECT_TRUE(job.has_end_time());
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
  EXPECT_EQ(StateOf(b.id), v1::IDLE);

  // The event log: sequences from 1 without gaps, the state changes in order.
  std::vector<v1::JobState> states;
  auto events = Events(job.id());
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].sequence(), static_cast<int64_t>(i) + 1);
    EXPECT_TRUE(events[i].has_time());
    if (events[i].has_state_change()) states.push_back(events[i].state_change().to());
  }
  EXPECT_THAT(states, ElementsAre(v1::QUEUED, v1::STARTING, v1::RUNNING, v1::SUCCEEDED));
  EXPECT_THAT(c_->KvPut(put), StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
}

TEST_F(CoordinatorTest, GangSchedulingBackfillsAndGroupsRanksByHost) {
  Worker a = Register("a1", "host-a");
  Worker b1 = Register("b1", "host-b");
  Worker a2 = Register("a2", "host-a");
  ASSERT_OK_AND_ASSIGN(v1::Job j1, c_->SubmitJob(Spec(2)));
  ASSERT_OK_AND_ASSIGN(v1::Job j2, c_->SubmitJob(Spec(2)));
  ASSERT_OK_AND_ASSIGN(v1::Job j3, c_->SubmitJob(Spec(1)));
  j1 = GetJob(j1.id());
  ASSERT_EQ(j1.state(), v1::STARTING);
  // Both ranks on host-a (the host with the most idle workers).
  EXPECT_EQ(j1.members(0).worker_id(), a.id);
  EXPECT_EQ(j1.members(1).worker_id(), a2.id);
  EXPECT_EQ(j1.members(0).host(), "host-a");
  // j2 needs 2 and only 1 is idle; j3 fits there and starts before it
  // (backfill: j2 has not waited head_reservation_after yet).
  EXPECT_EQ(GetJob(j2.id()).state(), v1::QUEUED);
  EXPECT_EQ(GetJob(j3.id()).state(), v1::STARTING);
  EXPECT_EQ(GetJob(j3.id()).members(0).worker_id(), b1.id);
  ASSERT_OK(c_->CancelJob(j1.id(), ""));
  EXPECT_EQ(GetJob(j2.id()).state(), v1::STARTING);
  EXPECT_EQ(GetJob(j3.id()).state(), v1::STARTING);
  EXPECT_EQ(StateOf(b1.id), v1::BUSY);
  // Disjoint workers.
  std::set<std::string> used;
  const v1::Job s2 = GetJob(j2.id());
  const v1::Job s3 = GetJob(j3.id());
  for (const auto& m : s2.members()) used.insert(m.worker_id());
  for (const auto& m : s3.members()) used.insert(m.worker_id());
  EXPECT_THAT(used, SizeIs(3));
}

TEST_F(CoordinatorTest, NewWorkersStartAQueuedJob) {
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(2)));
  Register("a");
  EXPECT_EQ(GetJob(job.id()).state(), v1::QUEUED);
  Register("b");
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
}

TEST_F(CoordinatorTest, CancelInEveryState) {
  EXPECT_THAT(c_->CancelJob("job-9", ""), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(c_->CancelJob("bogus", ""), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  ASSERT_OK_AND_ASSIGN(v1::Job queued, c_->SubmitJob(Spec(3)));
  EXPECT_THAT(c_->CancelJob(queued.id(), std::string(1025, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reason")));
  ASSERT_OK_AND_ASSIGN(v1::Job c1, c_->CancelJob(queued.id(), "not needed"));
  EXPECT_EQ(c1.state(), v1::CANCELLED);
  EXPECT_THAT(c1.reason(), HasSubstr("not needed"));
  EXPECT_THAT(c_->CancelJob(queued.id(), ""),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("CANCELLED")));

  Worker a = Register("a");
  Worker b = Register("b");
  v1::Job running = StartJobOn(a, b);
  PublishLayout(running, {10, 20});
  ASSERT_EQ(GetJob(running.id()).state(), v1::RUNNING);
  Capture<std::string> waiting;
  c_->KvGet(running.id(), running.epoch(), "never", clock_.Now() + absl::Seconds(10),
            waiting.Callback());
  ASSERT_OK(c_->CancelJob(running.id(), ""));
  ASSERT_TRUE(waiting.result.has_value());
  EXPECT_THAT(*waiting.result, StatusIs(absl::StatusCode::kAborted, HasSubstr("CANCELLED")));
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(a, v1::BUSY, running.id(), running.epoch()));
  EXPECT_TRUE(HasAbort(resp, running.id()));
  EXPECT_EQ(StateOf(a.id), v1::RELEASING);  // until it says it stopped
  ASSERT_OK(Beat(a));
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
  EXPECT_EQ(GetJob(running.id()).reason(), "cancelled by user");
  // Progress reports are told to abort.
  v1::ReportProgressRequest progress;
  progress.set_job_id(running.id());
  progress.set_epoch(running.epoch());
  ASSERT_OK_AND_ASSIGN(auto presp, c_->ReportProgress(progress));
  EXPECT_TRUE(presp.abort());
}

TEST_F(CoordinatorTest, LostWorkerFailsItsJobAndFreesTheOthers) {
  Worker a = Register("a");
  Worker b = Register("b");
  v1::Job job = StartJobOn(a, b);
  for (int i = 0; i < 6; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_OK(Beat(b, v1::BUSY, job.id(), job.epoch()));
    c_->Tick();
  }
  job = GetJob(job.id());
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("worker w-1 (rank 0) lost"));
  EXPECT_EQ(StateOf(a.id), v1::LOST);
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(b, v1::BUSY, job.id(), job.epoch()));
  EXPECT_TRUE(HasAbort(resp, job.id()));
  EXPECT_EQ(StateOf(b.id), v1::RELEASING);
  ASSERT_OK(Beat(b));
  EXPECT_EQ(StateOf(b.id), v1::IDLE);
}

TEST_F(CoordinatorTest, RestartedWorkerFailsItsJob) {
  Worker a = Register("a");
  Worker b = Register("b");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(2)));
  StartRank(a);
  Register("a", "h1", "inc-2");
  job = GetJob(job.id());
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("worker w-1 (rank 0) lost: it restarted"));
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(b));
  EXPECT_TRUE(HasAbort(resp, job.id()));
}

TEST_F(CoordinatorTest, RankErrorFailsTheJob) {
  Worker a = Register("a");
  Worker b = Register("b");
  v1::Job job = StartJobOn(a, b);
  ASSERT_OK(Result(job, 1, false, "NCCL error: unhandled system error"));
  job = GetJob(job.id());
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("rank 1 (worker w-2) failed: NCCL error"));
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(a, v1::BUSY, job.id(), job.epoch()));
  EXPECT_TRUE(HasAbort(resp, job.id()));
  // A late result for the ended job is accepted and ignored.
  EXPECT_OK(Result(job, 0, true));
  EXPECT_EQ(GetJob(job.id()).state(), v1::FAILED);
}

TEST_F(CoordinatorTest, ResultChecksRankAndWorker) {
  v1::Job job = StartTwoRankJob();
  v1::ReportResultRequest req;
  req.set_job_id(job.id());
  req.set_epoch(job.epoch());
  req.set_rank(5);
  req.set_ok(true);
  EXPECT_THAT(c_->ReportResult(req), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank")));
  req.set_rank(0);
  req.set_worker_id("w-42");
  EXPECT_THAT(c_->ReportResult(req),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("held by")));
  req.set_worker_id(job.members(0).worker_id());
  EXPECT_THAT(c_->ReportResult(req),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("before the assignment")));
  req.set_job_id("job-77");
  EXPECT_THAT(c_->ReportResult(req), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(CoordinatorTest, JobsKeptAreCapped) {
  options_.max_jobs = 2;
  Open(":memory:");
  ASSERT_OK_AND_ASSIGN(v1::Job j1, c_->SubmitJob(Spec(1)));
  ASSERT_OK(c_->CancelJob(j1.id(), ""));
  ASSERT_OK(c_->SubmitJob(Spec(1)));
  EXPECT_THAT(c_->SubmitJob(Spec(1)),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("jobs kept")));
}

TEST_F(CoordinatorTest, UnknownFieldsAreNotStored) {
  v1::JobSpec spec = Spec(1);
  spec.GetReflection()->MutableUnknownFields(&spec)->AddLengthDelimited(
      999, std::string(1000, 'u'));
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(spec));
  EXPECT_EQ(GetJob(job.id()).spec().GetReflection()->GetUnknownFields(
                GetJob(job.id()).spec()).field_count(), 0);
}

TEST_F(CoordinatorTest, ProgressEventsAreThrottled) {
  Worker a = Register("a");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1, 100)));
  job = GetJob(job.id());
  StartRank(a);
  PublishLayout(job, {8});
  const size_t before = Events(job.id()).size();
  v1::ReportProgressRequest req;
  req.set_job_id(job.id());
  req.set_epoch(1);
  req.set_rank(0);
  req.set_worker_id(a.id);
  for (int step = 1; step <= 5; ++step) {
    req.mutable_progress()->set_step(step);
    ASSERT_OK(c_->ReportProgress(req));
  }
  EXPECT_EQ(GetJob(job.id()).progress().step(), 5);
  EXPECT_EQ(Events(job.id()).size(), before + 1);  // only step 1 so far
  clock_.Advance(absl::Seconds(1));
  c_->Tick();
  auto events = Events(job.id());
  ASSERT_EQ(events.size(), before + 2);
  EXPECT_EQ(events.back().progress().step(), 5);
  req.mutable_progress()->set_step(-1);
  EXPECT_THAT(c_->ReportProgress(req), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  req.mutable_progress()->set_step(6);
  req.set_rank(3);
  EXPECT_THAT(c_->ReportProgress(req), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  req.set_job_id("job-55");
  EXPECT_THAT(c_->ReportProgress(req), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(CoordinatorTest, ListJobsFiltersAndPages) {
  for (int i = 0; i < 5; ++i) ASSERT_OK(c_->SubmitJob(Spec(1)));
  ASSERT_OK(c_->CancelJob("job-2", ""));
  ASSERT_OK(c_->CancelJob("job-4", ""));
  ASSERT_OK_AND_ASSIGN(auto all, c_->ListJobs({}, 0, ""));
  ASSERT_THAT(all.jobs, SizeIs(5));
  EXPECT_EQ(all.jobs[0].id(), "job-5");  // newest first
  EXPECT_EQ(all.next_page_token, "");
  // Pages of 2: 5 4 | 3 2 | 1, and a job submitted meanwhile is newer than
  // the first page, so it does not show up on later ones.
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    ASSERT_OK_AND_ASSIGN(auto page, c_->ListJobs({}, 2, token));
    EXPECT_LE(page.jobs.size(), 2u);
    for (const v1::Job& j : page.jobs) seen.push_back(j.id());
    token = page.next_page_token;
    if (++pages == 1) {
      ASSERT_OK(c_->SubmitJob(Spec(1)));
    }
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_THAT(seen, ElementsAre("job-5", "job-4", "job-3", "job-2", "job-1"));
  // A filter pages too, and its token is refused with another filter.
  ASSERT_OK_AND_ASSIGN(auto c1, c_->ListJobs({v1::CANCELLED}, 1, ""));
  ASSERT_THAT(c1.jobs, SizeIs(1));
  EXPECT_EQ(c1.jobs[0].id(), "job-4");
  ASSERT_FALSE(c1.next_page_token.empty());
  // The same states in another order and repeated are the same filter.
  ASSERT_OK_AND_ASSIGN(auto c2, c_->ListJobs({v1::CANCELLED, v1::CANCELLED}, 1,
                                             c1.next_page_token));
  ASSERT_THAT(c2.jobs, SizeIs(1));
  EXPECT_EQ(c2.jobs[0].id(), "job-2");
  EXPECT_EQ(c2.next_page_token, "");
  EXPECT_THAT(c_->ListJobs({v1::QUEUED}, 1, c1.next_page_token),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("page_token: made with other filters")));
  EXPECT_THAT(c_->ListJobs({}, 0, "bogus"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("page_token: not a page token")));
  EXPECT_THAT(c_->ListJobs({}, -1, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("page_size")));
  EXPECT_THAT(c_->ListJobs({static_cast<v1::JobState>(77)}, 0, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("states")));
  // A byte cap ends a page early (but never empty).
  ASSERT_OK_AND_ASSIGN(auto small, c_->ListJobs({}, 0, "", 1));
  ASSERT_THAT(small.jobs, SizeIs(1));
  EXPECT_FALSE(small.next_page_token.empty());
  EXPECT_THAT(c_->GetJob("job-0"), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(c_->GetJob("job-01"), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(CoordinatorTest, ReportResultAsyncAnswersOnceTheResultIsDurable) {
  const std::string path = TempPath("async-result.db");
  FaultStateStore* store = OpenWithFaults(path);
  ASSERT_NE(store, nullptr);
  Worker a = Register("a");
  Worker b = Register("b");
  v1::Job job = StartJobOn(a, b);
  PublishLayout(job, {4, 4});
  job = GetJob(job.id());
  auto request = [&](int rank) { return ResultRequest(job, rank, true); };
  // What has committed to the database when `done` runs.
  struct Seen {
    std::optional<absl::Status> status;
    std::set<int> finished;
    v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  };
  const int64_t job_num = 1;
  auto capture = [&](Seen* seen) {
    return [store, seen, job_num](absl::Status status) {
      seen->status = status;
      StateStore::Snapshot snapshot = store->committed();
      seen->finished = snapshot.finished_ranks[job_num];
      seen->state = snapshot.jobs[job_num].state();
    };
  };
  Seen bad, first, retry, second;
  v1::ReportResultRequest wrong = request(1);
  wrong.set_rank(7);
  c_->ReportResultAsync(wrong, capture(&bad));
  c_->ReportResultAsync(request(0), capture(&first));
  c_->ReportResultAsync(request(0), capture(&retry));
  c_->ReportResultAsync(request(1), capture(&second));
  ASSERT_TRUE(c_->WaitForNotifier(absl::Seconds(30)));
  ASSERT_TRUE(first.status.has_value());
  EXPECT_OK(*first.status);
  EXPECT_THAT(first.finished, ::testing::Contains(0));
  ASSERT_TRUE(second.status.has_value());
  EXPECT_OK(*second.status);
  EXPECT_EQ(second.state, v1::SUCCEEDED);
  ASSERT_TRUE(retry.status.has_value());
  EXPECT_OK(*retry.status);  // a retry of rank 0, already finished
  ASSERT_TRUE(bad.status.has_value());
  EXPECT_THAT(*bad.status,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank")));
  EXPECT_EQ(GetJob(job.id()).state(), v1::SUCCEEDED);
  Open(path);  // "kill and restart"
  EXPECT_EQ(GetJob(job.id()).state(), v1::SUCCEEDED);
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
