#include "worker/runtime/progress_reporter.h"

#include <atomic>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/fake_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/runtime/unexpected_control_plane.h"

namespace pshard::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::SizeIs;

// Records ReportProgress calls and answers them from a queue (OK, no abort,
// when empty). While `hold` is set, each call waits until it is released.
// The reporter calls nothing else.
class ProgressControlPlane : public UnexpectedControlPlane {
 public:
  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(
      const v1::ReportProgressRequest& request,
      absl::Duration deadline) override {
    absl::MutexLock lock(&mu_);
    requests_.push_back(request);
    deadlines_.push_back(deadline);
    auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !hold_;
    };
    mu_.Await(absl::Condition(&released));
    if (answers_.empty()) return v1::ReportProgressResponse();
    auto answer = std::move(answers_.front());
    answers_.pop_front();
    return answer;
  }

  void Hold(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_ = hold;
  }
  void Answer(absl::StatusOr<v1::ReportProgressResponse> answer) {
    absl::MutexLock lock(&mu_);
    answers_.push_back(std::move(answer));
  }
  // Waits (in real time, bounded) until `n` calls have arrived.
  bool WaitForCalls(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return requests_.size() >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30));
  }
  std::vector<v1::ReportProgressRequest> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  std::vector<absl::Duration> deadlines() {
    absl::MutexLock lock(&mu_);
    return deadlines_;
  }

 private:
  absl::Mutex mu_;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<v1::ReportProgressRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Duration> deadlines_ ABSL_GUARDED_BY(mu_);
  std::deque<absl::StatusOr<v1::ReportProgressResponse>> answers_
      ABSL_GUARDED_BY(mu_);
};

v1::JobProgress Step(int64_t step) {
  v1::JobProgress progress;
  progress.set_step(step);
  progress.set_total_steps(10);
  return progress;
}

class ProgressReporterTest : public ::testing::Test {
 protected:
  std::unique_ptr<ProgressReporter> MakeReporter() {
    return std::make_unique<ProgressReporter>(
        &control_, ProgressSource{"job-1", 4, 0, "w0"}, absl::Seconds(7),
        [this] { ++stops_; }, clock_);
  }

  ProgressControlPlane control_;
  FakeClock clock_;
  std::atomic<int> stops_{0};
};

TEST_F(ProgressReporterTest, SendsWhatIsPostedAsThisRanksProgress) {
  auto reporter = MakeReporter();
  reporter->Post(Step(1));
  ASSERT_TRUE(control_.WaitForCalls(1));
  ASSERT_TRUE(reporter->Flush(absl::Seconds(1)));
  const std::vector<v1::ReportProgressRequest> sent = control_.requests();
  ASSERT_THAT(sent, SizeIs(1));
  EXPECT_EQ(sent[0].job_id(), "job-1");
  EXPECT_EQ(sent[0].epoch(), 4);
  EXPECT_EQ(sent[0].rank(), 0);
  EXPECT_EQ(sent[0].worker_id(), "w0");
  EXPECT_EQ(sent[0].progress().step(), 1);
  EXPECT_EQ(sent[0].progress().total_steps(), 10);
  EXPECT_THAT(control_.deadlines(), ElementsAre(absl::Seconds(7)));
  EXPECT_EQ(stops_.load(), 0);
}

TEST_F(ProgressReporterTest, NewerProgressReplacesAnUnsentOne) {
  auto reporter = MakeReporter();
  control_.Hold(true);
  reporter->Post(Step(1));
  ASSERT_TRUE(control_.WaitForCalls(1));  // step 1 in flight, held
  reporter->Post(Step(2));
  reporter->Post(Step(3));
  control_.Hold(false);
  ASSERT_TRUE(control_.WaitForCalls(2));
  ASSERT_TRUE(reporter->Flush(absl::Seconds(1)));
  const std::vector<v1::ReportProgressRequest> sent = control_.requests();
  ASSERT_THAT(sent, SizeIs(2));
  EXPECT_EQ(sent[0].progress().step(), 1);
  EXPECT_EQ(sent[1].progress().step(), 3);
}

TEST_F(ProgressReporterTest, FlushGivesUpAtItsTimeoutOnTheClock) {
  auto reporter = MakeReporter();
  control_.Hold(true);
  reporter->Post(Step(1));
  ASSERT_TRUE(control_.WaitForCalls(1));
  bool flushed = true;
  std::thread flusher([&] { flushed = reporter->Flush(absl::Seconds(2)); });
  ASSERT_TRUE(clock_.WaitForWaiters(1, absl::Seconds(30)));
  clock_.Advance(absl::Seconds(2));
  flusher.join();
  EXPECT_FALSE(flushed);
  control_.Hold(false);
}

TEST_F(ProgressReporterTest, AStopReplyCallsOnStop) {
  v1::ReportProgressResponse abort;
  abort.set_abort(true);
  control_.Answer(abort);
  auto reporter = MakeReporter();
  reporter->Post(Step(1));
  ASSERT_TRUE(control_.WaitForCalls(1));
  ASSERT_TRUE(reporter->Flush(absl::Seconds(1)));
  EXPECT_EQ(stops_.load(), 1);
}

TEST_F(ProgressReporterTest, DestructionSendsWhatIsStillUnsent) {
  auto reporter = MakeReporter();
  control_.Hold(true);
  reporter->Post(Step(1));
  ASSERT_TRUE(control_.WaitForCalls(1));
  reporter->Post(Step(2));
  control_.Hold(false);
  reporter.reset();
  const std::vector<v1::ReportProgressRequest> sent = control_.requests();
  ASSERT_THAT(sent, SizeIs(2));
  EXPECT_EQ(sent[1].progress().step(), 2);
}

TEST(ProgressSaysStopTest, OnlyAJobTheCoordinatorNoLongerRunsStops) {
  v1::ReportProgressResponse go_on;
  v1::ReportProgressResponse abort;
  abort.set_abort(true);
  EXPECT_FALSE(ProgressSaysStop(go_on));
  EXPECT_TRUE(ProgressSaysStop(abort));
  EXPECT_TRUE(ProgressSaysStop(absl::NotFoundError("no job j")));
  EXPECT_TRUE(ProgressSaysStop(absl::FailedPreconditionError("epoch 2 over")));
  EXPECT_FALSE(ProgressSaysStop(absl::UnavailableError("connect failed")));
  EXPECT_FALSE(ProgressSaysStop(absl::DeadlineExceededError("slow")));
  EXPECT_FALSE(ProgressSaysStop(absl::InternalError("oops")));
}

}  // namespace
}  // namespace pshard::worker
