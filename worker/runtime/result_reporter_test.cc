#include "worker/runtime/result_reporter.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

TEST(FailureCauseOfTest, ByCodeWhenUnmarked) {
  EXPECT_EQ(FailureCauseOf(absl::OkStatus()), v1::FAILURE_CAUSE_UNSPECIFIED);
  EXPECT_EQ(FailureCauseOf(absl::UnavailableError("rank 1 is gone")),
            v1::FAILURE_CAUSE_PEER);
  EXPECT_EQ(FailureCauseOf(absl::DeadlineExceededError("allreduce timed out")),
            v1::FAILURE_CAUSE_PEER);
  EXPECT_EQ(FailureCauseOf(absl::CancelledError("worker shutting down")),
            v1::FAILURE_CAUSE_WORKER);
  EXPECT_EQ(FailureCauseOf(absl::AbortedError("stopped by the coordinator")),
            v1::FAILURE_CAUSE_WORKER);
  EXPECT_EQ(FailureCauseOf(absl::InvalidArgumentError("layout differs")),
            v1::FAILURE_CAUSE_JOB);
  EXPECT_EQ(FailureCauseOf(absl::ResourceExhaustedError("disk full")),
            v1::FAILURE_CAUSE_JOB);
  EXPECT_EQ(FailureCauseOf(absl::InternalError("bug")), v1::FAILURE_CAUSE_JOB);
}

TEST(FailureCauseOfTest, TheMarkWinsOverTheCode) {
  const absl::Status exited = WithFailureCause(
      absl::AbortedError("program exited with status 3"),
      v1::FAILURE_CAUSE_JOB);
  EXPECT_EQ(FailureCauseOf(exited), v1::FAILURE_CAUSE_JOB);
  EXPECT_EQ(exited.message(), "program exited with status 3");
  EXPECT_EQ(FailureCauseOf(WithFailureCause(absl::InternalError("no host memory"),
                                            v1::FAILURE_CAUSE_WORKER)),
            v1::FAILURE_CAUSE_WORKER);
  // Marking OK leaves it OK.
  EXPECT_TRUE(WithFailureCause(absl::OkStatus(), v1::FAILURE_CAUSE_JOB).ok());
}

}  // namespace
}  // namespace pshard::worker
