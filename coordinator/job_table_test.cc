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

// Adds a job and queues it at `at` as the coordinator does.
JobRec* Queue(JobTable& table, int world_size, int priority = 0,
              absl::Time at = kT0) {
  v1::JobSpec spec = Spec(world_size);
  spec.set_priority(priority);
  absl::StatusOr<JobRec*> j = table.Add(spec, at);
  EXPECT_OK(j);
  if (!j.ok()) return nullptr;
  JobTable::Transition((*j)->job, v1::QUEUED, "submitted", at);
  table.MarkQueued((*j)->num, at);
  return *j;
}

std::vector<IdleWorker> Workers(int n) {
  std::vector<IdleWorker> out;
  for (int i = 1; i <= n; ++i) out.push_back({i, "h1"});
  return out;
}

constexpr absl::Duration kReserve = absl::Minutes(5);

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

TEST(JobTableTest, PlaceNextAsksForIdleWorkersOnceAndOnlyWhenQueued) {
  JobTable table({});
  int asked = 0;
  auto idle = [&](const JobRec&) {
    ++asked;
    return Workers(2);
  };
  EXPECT_FALSE(table.PlaceNext(idle, 2, kT0, kReserve).has_value());
  EXPECT_EQ(asked, 0);
  JobRec* big = Queue(table, 3);
  Queue(table, 3);
  Queue(table, 3);
  // None fits: asked once for all three.
  EXPECT_FALSE(table.PlaceNext(idle, 3, kT0, kReserve).has_value());
  EXPECT_EQ(asked, 1);
  table.MarkEnded(big->num);
  table.MarkEnded(big->num + 1);
  table.MarkEnded(big->num + 2);
  EXPECT_FALSE(table.HasQueued());
}

TEST(JobTableTest, PlaceNextIsFifoWhenEverythingFits) {
  JobTable table({});
  Queue(table, 1);
  Queue(table, 1);
  std::optional<JobTable::Placement> p =
      table.PlaceNext([](const JobRec&) { return Workers(2); }, 2, kT0,
                      kReserve);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->job->job.id(), "job-1");
  EXPECT_THAT(p->worker_nums, ElementsAre(1));
}

TEST(JobTableTest, ALaterJobThatFitsBackfillsWhileTheHeadWaits) {
  JobTable table({});
  Queue(table, 4);  // needs 4; 2 of the pool's 4 are idle
  Queue(table, 3);  // does not fit either
  Queue(table, 2);  // fits
  std::optional<JobTable::Placement> p =
      table.PlaceNext([](const JobRec&) { return Workers(2); }, /*pool=*/4,
                      kT0 + absl::Minutes(1), kReserve);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->job->job.id(), "job-3");
  EXPECT_THAT(p->worker_nums, ElementsAre(1, 2));
}

TEST(JobTableTest, AHeadThatWaitedTooLongStopsBackfill) {
  JobTable table({});
  Queue(table, 4);
  Queue(table, 2, 0, kT0 + absl::Minutes(4));
  auto idle = [](const JobRec&) { return Workers(2); };
  // Just under the bound: the small job may still take the idle workers.
  std::optional<JobTable::Placement> p = table.PlaceNext(
      idle, 4, kT0 + kReserve - absl::Seconds(1), kReserve);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->job->job.id(), "job-2");
  // At the bound: they are kept for the head, which starts once 4 are idle.
  EXPECT_FALSE(table.PlaceNext(idle, 4, kT0 + kReserve, kReserve).has_value());
  p = table.PlaceNext([](const JobRec&) { return Workers(4); }, 4,
                      kT0 + kReserve, kReserve);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->job->job.id(), "job-1");
}

TEST(JobTableTest, OnlyTheHeadReservesAndAJobThatCanNeverStartIsNoHead) {
  JobTable table({});
  Queue(table, 64);  // can never start on a pool of 4: it holds nothing back
  Queue(table, 4);   // the head: it could start on the pool
  Queue(table, 3);   // waited as long, but it is not the head
  Queue(table, 1);
  auto idle = [](const JobRec&) { return Workers(2); };
  const absl::Time late = kT0 + absl::Hours(1);
  EXPECT_FALSE(table.PlaceNext(idle, 4, late, kReserve).has_value());
  // Before the bound the 1-worker job backfills past all three.
  std::optional<JobTable::Placement> p =
      table.PlaceNext(idle, 4, kT0, kReserve);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->job->job.id(), "job-4");
  // Once the pool has 64, the big job is the head again.
  p = table.PlaceNext(idle, 64, kT0, kReserve);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->job->job.id(), "job-4");
  EXPECT_FALSE(table.PlaceNext(idle, 64, late, kReserve).has_value());
}

TEST(JobTableTest, ARestartingHeadReservesAtOnce) {
  JobTable table({});
  JobRec* restarting = Queue(table, 4);
  restarting->job.set_restarts(1);  // min_world_size unset: needs 4
  Queue(table, 1);
  EXPECT_FALSE(table
                   .PlaceNext([](const JobRec&) { return Workers(2); }, 4,
                              kT0, kReserve)
                   .has_value());
  // One that can never start on the pool holds nothing back, restarting or
  // not.
  std::optional<JobTable::Placement> p = table.PlaceNext(
      [](const JobRec&) { return Workers(2); }, 3, kT0, kReserve);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->job->job.id(), "job-2");
}

TEST(JobTableTest, HigherPriorityFirstFifoWithinAPriority) {
  JobTable table({});
  Queue(table, 1, 0);     // job-1
  Queue(table, 1, 5);     // job-2
  Queue(table, 1, -3);    // job-3
  Queue(table, 1, 5);     // job-4
  Queue(table, 1, 1000);  // job-5
  std::vector<std::string> order;
  while (std::optional<JobTable::Placement> p = table.PlaceNext(
             [](const JobRec&) { return Workers(1); }, 1, kT0, kReserve)) {
    order.push_back(p->job->job.id());
    table.MarkActive(p->job->num);
  }
  EXPECT_THAT(order, ElementsAre("job-5", "job-2", "job-4", "job-1", "job-3"));
}

TEST(JobTableTest, ReservationFollowsPriorityOrder) {
  JobTable table({});
  Queue(table, 1, 0);   // job-1: would fit
  Queue(table, 4, 10);  // job-2: the head by priority, waiting since kT0
  auto idle = [](const JobRec&) { return Workers(2); };
  std::optional<JobTable::Placement> p =
      table.PlaceNext(idle, 4, kT0, kReserve);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->job->job.id(), "job-1");  // backfilled behind the head
  EXPECT_FALSE(table.PlaceNext(idle, 4, kT0 + kReserve, kReserve).has_value());
}

TEST(JobTableTest, QueuedReasonsAreRefreshedWhenThePoolChanges) {
  JobTable table({});
  JobRec* big = Queue(table, 64);
  JobRec* small = Queue(table, 2);
  big->job.set_reason("submitted; waiting for 64 idle workers");
  small->job.set_reason("submitted; waiting for 2 idle workers");
  std::vector<JobRec*> changed = table.RefreshQueuedReasons(3);
  EXPECT_THAT(changed, ElementsAre(big));
  EXPECT_EQ(big->job.reason(),
            "submitted; needs 64 workers; 3 are registered and not draining");
  EXPECT_EQ(small->job.reason(), "submitted; waiting for 2 idle workers");
  EXPECT_THAT(table.RefreshQueuedReasons(3), IsEmpty());  // the same pool
  EXPECT_THAT(table.RefreshQueuedReasons(4), ElementsAre(big));
  EXPECT_EQ(big->job.reason(),
            "submitted; needs 64 workers; 4 are registered and not draining");
  EXPECT_THAT(table.RefreshQueuedReasons(64), ElementsAre(big));
  EXPECT_EQ(big->job.reason(), "submitted; waiting for 64 idle workers");
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
  std::optional<JobTable::Placement> p = table.PlaceNext(
      [](const JobRec&) { return std::vector<IdleWorker>{{1, "h"}}; }, 1, kT0,
      kReserve);
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
