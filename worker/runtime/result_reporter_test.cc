#include "worker/runtime/result_reporter.h"

#include <deque>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "common/fake_clock.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "worker/runtime/unexpected_control_plane.h"

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

// Answers ReportResult from a queue of statuses (OK when empty) and notes
// when (on the test's clock) each call came; nothing else is called.
class ResultControlPlane : public UnexpectedControlPlane {
 public:
  explicit ResultControlPlane(const Clock& clock) : clock_(clock) {}
  std::deque<absl::Status> answers;
  std::vector<absl::Time> calls;

  absl::Status ReportResult(const v1::ReportResultRequest&,
                            absl::Duration) override {
    calls.push_back(clock_.Now());
    if (answers.empty()) return absl::OkStatus();
    absl::Status s = answers.front();
    answers.pop_front();
    return s;
  }

 private:
  const Clock& clock_;
};

absl::Status Report(ControlPlane& control, const Clock& clock,
                    const ResultRetry& retry) {
  return ReportRankResult(control, ResultSource{"job-1", 1, 0, "w-1"}, true,
                          "", v1::FAILURE_CAUSE_UNSPECIFIED, 10, "",
                          absl::Seconds(5), clock, retry);
}

// A coordinator down for a minute (a restart on a slow node) still gets the
// result: the tries back off to every 5 s and go on until it answers.
TEST(ReportRankResultTest, RetriesWithBackoffAcrossAnOutage) {
  FakeClock clock;
  clock.set_advance_on_sleep(true);
  ResultControlPlane control(clock);
  for (int i = 0; i < 16; ++i) {
    control.answers.push_back(i % 2 ? absl::DeadlineExceededError("slow")
                                    : absl::UnavailableError("down"));
  }
  const absl::Time start = clock.Now();
  EXPECT_OK(Report(control, clock, ResultRetry{absl::Minutes(10), nullptr}));
  ASSERT_EQ(control.calls.size(), 17u);
  EXPECT_EQ(control.calls[1] - control.calls[0], absl::Milliseconds(200));
  EXPECT_EQ(control.calls[2] - control.calls[1], absl::Milliseconds(400));
  EXPECT_EQ(control.calls[16] - control.calls[15], absl::Seconds(5));
  EXPECT_GT(control.calls.back() - start, absl::Seconds(50));
}

TEST(ReportRankResultTest, GivesUpAtTheBoundOrWhenStoppedOrRefused) {
  FakeClock clock;
  clock.set_advance_on_sleep(true);
  ResultControlPlane control(clock);
  for (int i = 0; i < 1000; ++i) control.answers.push_back(absl::UnavailableError("down"));
  const absl::Time start = clock.Now();
  EXPECT_THAT(Report(control, clock, ResultRetry{absl::Seconds(30), nullptr}),
              StatusIs(absl::StatusCode::kUnavailable, "down"));
  EXPECT_EQ(control.calls.back() - start, absl::Seconds(30));

  // Torn down: the next slice ends it.
  control.calls.clear();
  int polls = 0;
  EXPECT_THAT(Report(control, clock,
                     ResultRetry{absl::Minutes(10), [&] { return ++polls > 3; }}),
              StatusIs(absl::StatusCode::kUnavailable, "down"));
  EXPECT_LE(control.calls.size(), 3u);

  // The coordinator answered: no retry, whatever it said.
  control.calls.clear();
  control.answers.clear();
  control.answers.push_back(absl::InvalidArgumentError("final_step"));
  EXPECT_THAT(Report(control, clock, ResultRetry{absl::Minutes(10), nullptr}),
              StatusIs(absl::StatusCode::kInvalidArgument, "final_step"));
  EXPECT_EQ(control.calls.size(), 1u);
}

}  // namespace
}  // namespace pshard::worker
