#include "coordinator/restart_policy.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(RestartableCauseTest, OnlyFailuresNotTheJobsOwn) {
  v1::JobSpec spec;
  spec.mutable_synthetic();
  EXPECT_TRUE(RestartableCause(spec, v1::FAILURE_CAUSE_PEER));
  EXPECT_TRUE(RestartableCause(spec, v1::FAILURE_CAUSE_WORKER));
  EXPECT_FALSE(RestartableCause(spec, v1::FAILURE_CAUSE_JOB));
  EXPECT_FALSE(RestartableCause(spec, v1::FAILURE_CAUSE_UNSPECIFIED));
  // A workload that is not a program ignores restart_on_program_failure.
  spec.set_restart_on_program_failure(true);
  EXPECT_FALSE(RestartableCause(spec, v1::FAILURE_CAUSE_JOB));
}

TEST(RestartableCauseTest, ProgramFailureOnlyWhenAsked) {
  v1::JobSpec spec;
  spec.mutable_program();
  EXPECT_FALSE(RestartableCause(spec, v1::FAILURE_CAUSE_JOB));
  spec.set_restart_on_program_failure(true);
  EXPECT_TRUE(RestartableCause(spec, v1::FAILURE_CAUSE_JOB));
  EXPECT_TRUE(RestartableCause(spec, v1::FAILURE_CAUSE_UNSPECIFIED));
}

TEST(RestartReasonTest, RoundTripsThroughTheWaitingReason) {
  const std::string reason = RestartReason(1, 3, "worker w-2 (rank 1) lost: x");
  EXPECT_EQ(reason, "restart 1 of 3 after: worker w-2 (rank 1) lost: x");
  EXPECT_EQ(CauseOfRestartReason(reason), "worker w-2 (rank 1) lost: x");
  const std::string waiting = WaitingForRestartReason(reason, 4, 2);
  EXPECT_EQ(waiting, reason + "; waiting for 4 idle workers (at least 2)");
  EXPECT_EQ(RestartReasonOfWaiting(waiting), reason);
}

TEST(QueuedReasonTest, SaysWhetherTheJobCanEverStartOnThePool) {
  v1::JobSpec spec;
  spec.set_world_size(64);
  EXPECT_EQ(QueuedReason("submitted", spec, false, 64),
            "submitted; waiting for 64 idle workers");
  EXPECT_EQ(QueuedReason("submitted", spec, false, 3),
            "submitted; needs 64 workers; 3 are registered and not draining");
  EXPECT_EQ(QueuedReason("submitted", spec, false, 1),
            "submitted; needs 64 workers; 1 is registered and not draining");
  // A restart needs only min_world_size.
  spec.set_min_world_size(2);
  const std::string restart = RestartReason(1, 3, "x; waiting for y; needs z");
  EXPECT_EQ(QueuedReason(restart, spec, true, 3),
            WaitingForRestartReason(restart, 64, 2));
  EXPECT_EQ(QueuedReason(restart, spec, true, 1),
            restart + "; needs 2 workers (min_world_size); 1 is registered "
                      "and not draining");
  // Either form gives its prefix back, whatever the cause holds.
  for (int64_t pool : {1, 3}) {
    EXPECT_EQ(QueuedReasonPrefix(QueuedReason(restart, spec, true, pool)),
              restart);
    EXPECT_EQ(RestartReasonOfWaiting(QueuedReason(restart, spec, true, pool)),
              restart);
  }
  EXPECT_EQ(QueuedReasonPrefix("submitted"), "submitted");
}

TEST(PlaceRestartTest, SurvivorsFirstThenIdleUpToWorldSize) {
  // Survivor 3; idle 1, 2, 3, 4: the spare with the lowest number joins.
  EXPECT_THAT(PlaceRestart({{1, "h"}, {2, "h"}, {3, "h"}, {4, "h"}}, {3}, 2, 2),
              ElementsAre(1, 3));
  // Both survivors are kept even though lower-numbered spares are idle.
  EXPECT_THAT(PlaceRestart({{1, "h"}, {2, "h"}, {5, "h"}, {6, "h"}}, {5, 6}, 2, 2),
              ElementsAre(5, 6));
}

TEST(PlaceRestartTest, SmallerWorldDownToMinWorldSize) {
  EXPECT_THAT(PlaceRestart({{1, "h"}}, {1}, 2, 1), ElementsAre(1));
  EXPECT_THAT(PlaceRestart({{1, "h"}}, {1}, 2, 2), IsEmpty());
  EXPECT_THAT(PlaceRestart({}, {}, 2, 1), IsEmpty());
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
