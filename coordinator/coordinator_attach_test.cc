// Attachments (fast loss detection; see AttachWorker and WorkerDetached in
// coordinator.h) on a FakeClock that never moves: whatever is LOST here is
// lost by its stream's end, not by a heartbeat timeout.
#include "coordinator/coordinator_test_fixture.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kClosed[] = "its connection to the coordinator closed";

using CoordinatorAttachTest = CoordinatorTest;

TEST_F(CoordinatorAttachTest, StreamEndMakesTheWorkerLostAtOnce) {
  const Worker a = Register("a");
  ASSERT_OK_AND_ASSIGN(const int64_t attachment, Attach(a));
  EXPECT_EQ(StateOf(a.id), v1::IDLE);  // attaching changes no state
  ASSERT_OK(Detach(a, attachment));
  EXPECT_EQ(StateOf(a.id), v1::LOST);
  EXPECT_TRUE(Workers(/*include_lost=*/false).empty());
}

TEST_F(CoordinatorAttachTest, LostWorkerIsNotScheduledUntilItRegistersAgain) {
  const Worker a = Register("a");
  ASSERT_OK_AND_ASSIGN(const int64_t attachment, Attach(a));
  ASSERT_OK(Detach(a, attachment));
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  c_->Tick();
  EXPECT_EQ(GetJob(job.id()).state(), v1::QUEUED);
  // Still LOST: its heartbeats and attaches are refused, not revived.
  EXPECT_THAT(Beat(a).status(), StatusIs(absl::StatusCode::kNotFound,
                                         HasSubstr("was declared lost")));
  EXPECT_THAT(Attach(a).status(), StatusIs(absl::StatusCode::kNotFound,
                                           HasSubstr("register again")));
  c_->Tick();
  EXPECT_EQ(GetJob(job.id()).state(), v1::QUEUED);
  EXPECT_EQ(StateOf(a.id), v1::LOST);

  // Registering again (here with a new incarnation) makes it a worker like
  // any other: the job starts on it.
  const Worker again = Register("a", "h1", "inc-2");
  EXPECT_EQ(again.id, a.id);
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
  EXPECT_EQ(GetJob(job.id()).members(0).worker_id(), a.id);
  StartRank(again);
  EXPECT_EQ(StateOf(a.id), v1::BUSY);
}

TEST_F(CoordinatorAttachTest, OnlyTheCurrentAttachmentCounts) {
  const Worker a = Register("a");
  ASSERT_OK_AND_ASSIGN(const int64_t first, Attach(a));
  ASSERT_OK_AND_ASSIGN(const int64_t second, Attach(a));  // a re-attach
  EXPECT_NE(first, second);
  // The replaced stream closing late does not kill the new one.
  ASSERT_OK(Detach(a, first));
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
  // Nor does a close that names another incarnation.
  ASSERT_OK(c_->WorkerDetached(a.id, "inc-0", second));
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
  ASSERT_OK(Detach(a, second));
  EXPECT_EQ(StateOf(a.id), v1::LOST);
}

TEST_F(CoordinatorAttachTest, RegisteringAgainEndsEarlierAttachments) {
  const Worker a = Register("a");
  ASSERT_OK_AND_ASSIGN(const int64_t old_stream, Attach(a));
  // Same name and incarnation (after a coordinator restart, say): the stream
  // from before belongs to the membership that ended.
  Register("a");
  ASSERT_OK(Detach(a, old_stream));
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
  // A new incarnation: its predecessor's stream is stale too.
  ASSERT_OK_AND_ASSIGN(const int64_t before_restart, Attach(a));
  const Worker restarted = Register("a", "h1", "inc-2");
  ASSERT_OK(Detach(a, before_restart));
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
  ASSERT_OK_AND_ASSIGN(const int64_t current, Attach(restarted));
  ASSERT_OK(Detach(restarted, current));
  EXPECT_EQ(StateOf(a.id), v1::LOST);
}

TEST_F(CoordinatorAttachTest, AttachRejectsMalformedAndUnknownWorkers) {
  const Worker a = Register("a");
  auto attach = [&](const std::string& id, const std::string& incarnation) {
    v1::AttachRequest req;
    req.set_worker_id(id);
    req.set_incarnation(incarnation);
    return c_->AttachWorker(req).status();
  };
  EXPECT_THAT(attach("", "inc-1"), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("worker_id: missing")));
  EXPECT_THAT(attach("a", "inc-1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("worker_id: not a worker id")));
  EXPECT_THAT(attach(a.id, ""), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("incarnation")));
  EXPECT_THAT(attach(a.id, std::string(65, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("incarnation")));
  EXPECT_THAT(attach("w-9", "inc-1"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("is unknown")));
  EXPECT_THAT(attach(a.id, "inc-0"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("has a newer incarnation")));
  // A detach for a worker that does not exist is a stale stream, no error.
  EXPECT_OK(c_->WorkerDetached("w-9", "inc-1", 1));
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
}

TEST_F(CoordinatorAttachTest, BusyWorkerLostFailsItsJobNamingIt) {
  const Worker a = Register("a");
  const Worker b = Register("b");
  const v1::Job job = StartRunning(Spec(2), a, b);  // max_restarts 0
  ASSERT_EQ(job.state(), v1::RUNNING);
  ASSERT_OK_AND_ASSIGN(const int64_t attachment, Attach(b));
  ASSERT_OK(Detach(b, attachment));
  const v1::Job failed = GetJob(job.id());
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_EQ(failed.reason(),
            absl::StrCat("worker w-2 (rank 1) lost: ", kClosed));
  // The survivor is told to abort, and is free again once it has stopped.
  auto resp = Beat(a, v1::BUSY, job.id(), job.epoch());
  ASSERT_OK(resp);
  EXPECT_TRUE(HasAbort(*resp, job.id()));
  EXPECT_EQ(StateOf(a.id), v1::RELEASING);
  ASSERT_OK(Beat(a));
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
}

TEST_F(CoordinatorAttachTest, LossInTheBlameWindowRestartsNamingTheLostFirst) {
  const Worker a = Register("a");
  const Worker b = Register("b");
  const Worker spare = Register("c");
  v1::JobSpec spec = Spec(2);
  spec.set_max_restarts(1);
  const v1::Job job = StartRunning(spec, a, b);
  ASSERT_EQ(job.members(1).worker_id(), b.id);
  ASSERT_OK_AND_ASSIGN(const int64_t attachment, Attach(b));
  // a's collective fails first (held for the blame window), then b's
  // connection closes: b takes the blame, and the job restarts without it.
  v1::ReportResultRequest failure =
      ResultRequest(job, 0, false, "receiving from rank 1: connection reset");
  failure.set_cause(v1::FAILURE_CAUSE_PEER);
  ASSERT_OK(c_->ReportResult(failure));
  ASSERT_EQ(GetJob(job.id()).state(), v1::RUNNING);
  ASSERT_OK(Detach(b, attachment));
  const v1::Job restarted = GetJob(job.id());
  EXPECT_EQ(restarted.state(), v1::STARTING);
  EXPECT_EQ(restarted.restarts(), 1);
  EXPECT_EQ(restarted.epoch(), job.epoch() + 1);
  EXPECT_THAT(restarted.reason(),
              StartsWith(absl::StrCat("restart 1 of 1 after: rank 1 (worker "
                                      "w-2) lost: ",
                                      kClosed,
                                      "; rank 0 (worker w-1) then failed: "
                                      "receiving from rank 1: connection "
                                      "reset")));
  ASSERT_EQ(restarted.members_size(), 2);
  EXPECT_EQ(restarted.members(0).worker_id(), a.id);
  EXPECT_EQ(restarted.members(1).worker_id(), spare.id);
  EXPECT_EQ(StateOf(b.id), v1::LOST);
}

TEST_F(CoordinatorAttachTest, LossWithoutAHeldFailureRestartsNamingTheWorker) {
  const Worker a = Register("a");
  const Worker b = Register("b");
  v1::JobSpec spec = Spec(2);
  spec.set_max_restarts(1);
  spec.set_min_world_size(1);
  const v1::Job job = StartRunning(spec, a, b);
  ASSERT_OK_AND_ASSIGN(const int64_t attachment, Attach(b));
  ASSERT_OK(Detach(b, attachment));
  const v1::Job restarted = GetJob(job.id());
  EXPECT_EQ(restarted.state(), v1::STARTING);
  EXPECT_THAT(restarted.reason(),
              StartsWith(absl::StrCat(
                  "restart 1 of 1 after: worker w-2 (rank 1) lost: ",
                  kClosed)));
  ASSERT_EQ(restarted.members_size(), 1);  // no spare: the survivor alone
  EXPECT_EQ(restarted.members(0).worker_id(), a.id);
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
