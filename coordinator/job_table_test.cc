#include "coordinator/job_table.h"

#include <string>
#include <vector>

#include "common/proto_time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

v1::JobSpec Spec(int world_size) {
  v1::JobSpec spec;
  spec.set_world_size(world_size);
  spec.set_steps(10);
  return spec;
}

// Adds a job and queues it as the coordinator does.
JobRec* Queue(JobTable& table, int world_size) {
  absl::StatusOr<JobRec*> j = table.Add(Spec(world_size), kT0);
  EXPECT_OK(j);
  if (!j.ok()) return nullptr;
  JobTable::Transition((*j)->job, v1::QUEUED, "submitted", kT0);
  table.MarkQueued((*j)->num);
  return *j;
}

TEST(JobTableTest, AddNumbersJobsAndFindsThemByIdOnly) {
  JobTable table({});
  ASSERT_OK_AND_ASSIGN(JobRec * a, table.Add(Spec(2), kT0));
  ASSERT_OK_AND_ASSIGN(JobRec * b, table.Add(Spec(2), kT0));
  EXPECT_EQ(a->job.id(), "job-1");
  EXPECT_EQ(b->job.id(), "job-2");
  EXPECT_EQ(a->job.state(), v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ(a->job.progress().total_steps(), 10);
  EXPECT_EQ(FromProto(a->job.submit_time()), kT0);
  EXPECT_EQ(table.Find("job-2"), b);
  EXPECT_EQ(table.Find(1), a);
  EXPECT_EQ(table.Find("job-02"), nullptr);
  EXPECT_THAT(table.Get("job-9"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no job job-9")));
}

TEST(JobTableTest, JobsKeptAndUnfinishedJobsAreCapped) {
  JobTable table({/*max_jobs=*/3, /*max_unfinished_jobs=*/2});
  JobRec* a = Queue(table, 1);
  Queue(table, 1);
  EXPECT_THAT(table.Add(Spec(1), kT0),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("too many unfinished jobs (2)")));
  table.MarkEnded(a->num);
  Queue(table, 1);
  table.MarkEnded(a->num + 1);
  EXPECT_THAT(table.Add(Spec(1), kT0),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("too many jobs kept (3)")));
}

TEST(JobTableTest, TransitionSetsTimesAndReturnsTheEdge) {
  v1::Job job;
  job.set_state(v1::QUEUED);
  v1::JobEvent e = JobTable::Transition(job, v1::STARTING, "scheduled", kT0);
  EXPECT_EQ(job.state(), v1::STARTING);
  EXPECT_EQ(job.reason(), "scheduled");
  EXPECT_EQ(FromProto(job.start_time()), kT0);
  EXPECT_FALSE(job.has_end_time());
  EXPECT_EQ(e.state_change().from(), v1::QUEUED);
  EXPECT_EQ(e.state_change().to(), v1::STARTING);
  EXPECT_EQ(e.state_change().reason(), "scheduled");
  JobTable::Transition(job, v1::FAILED, "lost", kT0 + absl::Seconds(1));
  EXPECT_EQ(FromProto(job.start_time()), kT0);
  EXPECT_EQ(FromProto(job.end_time()), kT0 + absl::Seconds(1));
}

TEST(JobTableTest, ActiveAtAndCheckRankNameWhatIsWrong) {
  JobTable table({});
  JobRec* j = Queue(table, 2);
  EXPECT_THAT(table.ActiveAt(j->job.id(), 1),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("job-1 is not active (QUEUED)")));
  JobTable::Transition(j->job, v1::STARTING, "", kT0);
  j->job.set_epoch(2);
  table.MarkActive(j->num);
  EXPECT_THAT(table.ActiveAt(j->job.id(), 1),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("epoch 1 is stale; current epoch is 2")));
  EXPECT_THAT(table.ActiveAt(j->job.id(), 3),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("epoch 3 is unknown")));
  EXPECT_OK(table.ActiveAt(j->job.id(), 2));
  EXPECT_THAT(table.ActiveJobs(), ElementsAre(j->num));

  j->ranks.resize(2);
  for (int r = 0; r < 2; ++r) {
    v1::JobMember* m = j->job.add_members();
    m->set_rank(r);
    m->set_worker_id(r == 0 ? "w-1" : "w-2");
  }
  EXPECT_OK(JobTable::CheckRank(*j, 1, "w-2"));
  EXPECT_THAT(JobTable::CheckRank(*j, 2, "w-2"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank: 2 is out of range for job-1")));
  EXPECT_THAT(JobTable::CheckRank(*j, 1, "w-1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 1 of job-1 is held by w-2, not w-1")));
  EXPECT_EQ(JobTable::Who(*j, 1), "rank 1 (worker w-2)");
}

TEST(JobTableTest, PlaceHeadIsFifoAndAsksForIdleWorkersOnlyWhenQueued) {
  JobTable table({});
  int asked = 0;
  auto idle = [&](const JobRec&) {
    ++asked;
    return std::vector<IdleWorker>{{1, "h1"}, {2, "h1"}};
  };
  EXPECT_FALSE(table.PlaceHead(idle).has_value());
  EXPECT_EQ(asked, 0);
  JobRec* big = Queue(table, 3);
  Queue(table, 1);
  // The head needs 3 workers: the small job behind it waits too.
  EXPECT_FALSE(table.PlaceHead(idle).has_value());
  EXPECT_EQ(asked, 1);
  table.MarkEnded(big->num);
  std::optional<JobTable::Placement> p = table.PlaceHead(idle);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->job->job.id(), "job-2");
  EXPECT_THAT(p->worker_nums, ElementsAre(1));
}

TEST(JobTableTest, RestoreKeepsNumbersAndQueues) {
  JobTable table({});
  v1::Job queued;
  queued.set_id("job-4");
  queued.set_state(v1::QUEUED);
  queued.mutable_spec()->set_world_size(1);
  table.Restore(4, queued);
  v1::Job running;
  running.set_id("job-7");
  running.set_state(v1::RUNNING);
  table.Restore(7, running);
  EXPECT_THAT(table.ActiveJobs(), ElementsAre(7));
  ASSERT_OK_AND_ASSIGN(JobRec * next, table.Add(Spec(1), kT0));
  EXPECT_EQ(next->job.id(), "job-8");
  std::optional<JobTable::Placement> p =
      table.PlaceHead(
          [](const JobRec&) { return std::vector<IdleWorker>{{1, "h"}}; });
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->job->job.id(), "job-4");
}

TEST(JobTableTest, RequestIdsIndexAddRestoreAndRemove) {
  JobTable table({});
  EXPECT_OK(JobTable::ValidateRequestId(""));
  EXPECT_OK(JobTable::ValidateRequestId("pshardctl-0123abcd"));
  EXPECT_THAT(JobTable::ValidateRequestId(std::string(129, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("(129 characters)")));
  ASSERT_OK_AND_ASSIGN(JobRec * a, table.Add(Spec(2), kT0, "a"));
  EXPECT_EQ(a->job.request_id(), "a");
  ASSERT_OK_AND_ASSIGN(const JobRec* found, table.FindSubmission("a", Spec(2)));
  EXPECT_EQ(found, a);
  ASSERT_OK_AND_ASSIGN(found, table.FindSubmission("b", Spec(2)));
  EXPECT_EQ(found, nullptr);
  EXPECT_THAT(table.FindSubmission("a", Spec(3)),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("request_id a was used for job job-1 with a "
                                 "different spec")));
  // A record taken out (a submission whose commit failed) frees its id.
  table.Remove(a->num);
  ASSERT_OK_AND_ASSIGN(found, table.FindSubmission("a", Spec(2)));
  EXPECT_EQ(found, nullptr);
  // A stored job brings its id back.
  v1::Job stored;
  stored.set_id("job-5");
  stored.set_state(v1::SUCCEEDED);
  *stored.mutable_spec() = Spec(2);
  stored.set_request_id("a");
  JobRec& restored = table.Restore(5, stored);
  ASSERT_OK_AND_ASSIGN(found, table.FindSubmission("a", Spec(2)));
  EXPECT_EQ(found, &restored);
}

TEST(JobTableTest, ListFiltersNewestFirstAndPages) {
  JobTable table({});
  for (int i = 0; i < 3; ++i) Queue(table, 1);
  JobTable::Transition(table.Find(2)->job, v1::CANCELLED, "", kT0);
  ASSERT_OK_AND_ASSIGN(JobPage first, table.List({v1::QUEUED}, 1, "", INT64_MAX));
  ASSERT_EQ(first.jobs.size(), 1u);
  EXPECT_EQ(first.jobs[0].id(), "job-3");
  ASSERT_OK_AND_ASSIGN(JobPage second, table.List({v1::QUEUED}, 1,
                                                  first.next_page_token,
                                                  INT64_MAX));
  ASSERT_EQ(second.jobs.size(), 1u);
  EXPECT_EQ(second.jobs[0].id(), "job-1");
  EXPECT_THAT(second.next_page_token, IsEmpty());
  EXPECT_THAT(table.List({}, 0, first.next_page_token, INT64_MAX),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("page_token")));
  EXPECT_THAT(table.List({static_cast<v1::JobState>(99)}, 0, "", INT64_MAX),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("states: unknown job state 99")));
  // A byte budget ends a page early, but never before its first job.
  ASSERT_OK_AND_ASSIGN(JobPage small, table.List({}, 0, "", 1));
  EXPECT_EQ(small.jobs.size(), 1u);
  EXPECT_FALSE(small.next_page_token.empty());
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
