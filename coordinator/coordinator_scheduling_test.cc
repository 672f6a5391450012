// Coordinator facade tests: scheduling without head-of-line blocking
// (backfill, the head's reservation, jobs that can never start, priority).
#include "coordinator/coordinator_test_fixture.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::HasSubstr;

v1::JobSpec Prio(int world_size, int priority) {
  v1::JobSpec spec = Spec(world_size);
  spec.set_priority(priority);
  return spec;
}

class SchedulingTest : public CoordinatorTest {
 protected:
  // Four workers; a two-rank job runs on the first two, so two are idle.
  void SetUp() override {
    // Hours pass on the clock in these tests; no worker is lost meanwhile.
    options_.worker_timeout = absl::Hours(24);
    CoordinatorTest::SetUp();
    for (const char* name : {"a", "b", "c", "d"}) w_.push_back(Register(name));
    running_ = StartJobOn(w_[0], w_[1]);
    ASSERT_EQ(running_.state(), v1::STARTING);
    ASSERT_EQ(running_.members(0).worker_id(), w_[0].id);
  }

  // Ends the running job; its workers say they stopped and are idle.
  void FreeTheRunningJob() {
    ASSERT_OK(c_->CancelJob(running_.id(), ""));
    ASSERT_OK(Beat(w_[0]));
    ASSERT_OK(Beat(w_[1]));
  }

  std::vector<Worker> w_;
  v1::Job running_;
};

TEST_F(SchedulingTest, ALaterJobThatFitsStartsWhileTheHeadWaits) {
  ASSERT_OK_AND_ASSIGN(v1::Job head, c_->SubmitJob(Spec(4)));
  EXPECT_EQ(head.state(), v1::QUEUED);
  EXPECT_EQ(head.reason(), "submitted; waiting for 4 idle workers");
  ASSERT_OK_AND_ASSIGN(v1::Job small, c_->SubmitJob(Spec(2)));
  EXPECT_EQ(small.state(), v1::STARTING) << small.reason();
  EXPECT_EQ(GetJob(head.id()).state(), v1::QUEUED);
}

TEST_F(SchedulingTest, AHeadThatWaitedLongerThanTheBoundIsNotPassed) {
  ASSERT_OK_AND_ASSIGN(v1::Job head, c_->SubmitJob(Spec(4)));
  clock_.Advance(options_.head_reservation_after);
  c_->Tick();
  ASSERT_OK_AND_ASSIGN(v1::Job small, c_->SubmitJob(Spec(2)));
  // The two idle workers are kept for the head.
  EXPECT_EQ(small.state(), v1::QUEUED);
  FreeTheRunningJob();
  // Four idle: the head starts first, the small job waits behind it.
  EXPECT_EQ(GetJob(head.id()).state(), v1::STARTING);
  EXPECT_EQ(GetJob(small.id()).state(), v1::QUEUED);
}

TEST_F(SchedulingTest, TheBoundComesFromTheOptions) {
  options_.head_reservation_after = absl::ZeroDuration();  // strict FIFO
  Open(":memory:");
  w_.clear();
  for (const char* name : {"a", "b", "c", "d"}) w_.push_back(Register(name));
  running_ = StartJobOn(w_[0], w_[1]);
  ASSERT_OK_AND_ASSIGN(v1::Job head, c_->SubmitJob(Spec(4)));
  ASSERT_OK_AND_ASSIGN(v1::Job small, c_->SubmitJob(Spec(2)));
  EXPECT_EQ(small.state(), v1::QUEUED);
}

TEST_F(SchedulingTest, AJobThatCanNeverStartSaysSoAndBlocksNobody) {
  clock_.Advance(absl::Hours(1));  // long past any reservation bound
  ASSERT_OK_AND_ASSIGN(v1::Job huge, c_->SubmitJob(Spec(64)));
  EXPECT_EQ(huge.state(), v1::QUEUED);
  EXPECT_EQ(huge.reason(),
            "submitted; needs 64 workers; 4 are registered and not draining");
  clock_.Advance(absl::Hours(1));
  c_->Tick();
  ASSERT_OK_AND_ASSIGN(v1::Job small, c_->SubmitJob(Spec(2)));
  EXPECT_EQ(small.state(), v1::STARTING);
  // The reason follows the pool: a new worker, a drained one.
  Register("e");
  EXPECT_EQ(GetJob(huge.id()).reason(),
            "submitted; needs 64 workers; 5 are registered and not draining");
  ASSERT_OK(c_->DrainWorker("e"));
  ASSERT_OK(c_->DrainWorker("d"));
  EXPECT_EQ(GetJob(huge.id()).reason(),
            "submitted; needs 64 workers; 3 are registered and not draining");
  // Distinct from a job that only waits for busy workers to finish.
  ASSERT_OK_AND_ASSIGN(v1::Job three, c_->SubmitJob(Spec(3)));
  EXPECT_EQ(three.reason(), "submitted; waiting for 3 idle workers");
}

TEST_F(SchedulingTest, TheNeverStartReasonIsDurable) {
  const std::string path = TempPath("state.db");
  Open(path);
  Register("a");
  ASSERT_OK_AND_ASSIGN(v1::Job huge, c_->SubmitJob(Spec(8)));
  Register("b");
  EXPECT_EQ(GetJob(huge.id()).reason(),
            "submitted; needs 8 workers; 2 are registered and not draining");
  Open(path);
  EXPECT_EQ(GetJob(huge.id()).reason(),
            "submitted; needs 8 workers; 2 are registered and not draining");
}

TEST_F(SchedulingTest, HigherPriorityStartsFirstFifoWithinAPriority) {
  ASSERT_OK_AND_ASSIGN(v1::Job low, c_->SubmitJob(Prio(2, -5)));
  // job-2 got the idle pair at once; fill the pool's queue behind it.
  ASSERT_EQ(low.state(), v1::STARTING);
  ASSERT_OK_AND_ASSIGN(v1::Job mid1, c_->SubmitJob(Prio(2, 0)));
  ASSERT_OK_AND_ASSIGN(v1::Job high, c_->SubmitJob(Prio(2, 7)));
  ASSERT_OK_AND_ASSIGN(v1::Job mid2, c_->SubmitJob(Prio(2, 0)));
  FreeTheRunningJob();
  EXPECT_EQ(GetJob(high.id()).state(), v1::STARTING);
  EXPECT_EQ(GetJob(mid1.id()).state(), v1::QUEUED);
  ASSERT_OK(c_->CancelJob(low.id(), ""));
  ASSERT_OK(Beat(w_[2]));
  ASSERT_OK(Beat(w_[3]));
  EXPECT_EQ(GetJob(mid1.id()).state(), v1::STARTING);
  EXPECT_EQ(GetJob(mid2.id()).state(), v1::QUEUED);
}

TEST_F(SchedulingTest, PriorityIsValidated) {
  EXPECT_THAT(c_->SubmitJob(Prio(1, 1001)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("priority: must be in [-1000, 1000]")));
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
