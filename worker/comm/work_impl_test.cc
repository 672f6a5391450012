#include "worker/comm/work_impl.h"

#include <thread>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

TEST(CompletionWorkTest, WaitTimesOutWhilePending) {
  CompletionWork work;
  EXPECT_FALSE(work.IsCompleted());
  EXPECT_THAT(work.Wait(absl::Milliseconds(5)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       ::testing::HasSubstr("did not finish")));
}

TEST(CompletionWorkTest, FirstStatusWinsAndCallbacksRunOnce) {
  CompletionWork work;
  int calls = 0;
  absl::Status seen;
  work.OnCompletion([&](absl::Status s) {
    ++calls;
    seen = s;
  });
  work.Complete(absl::AbortedError("first"));
  work.Complete(absl::OkStatus());
  EXPECT_EQ(calls, 1);
  EXPECT_THAT(seen, StatusIs(absl::StatusCode::kAborted, "first"));
  EXPECT_THAT(work.Wait(absl::Seconds(1)),
              StatusIs(absl::StatusCode::kAborted, "first"));
  // A callback added after completion runs at once.
  bool late = false;
  work.OnCompletion([&](absl::Status) { late = true; });
  EXPECT_TRUE(late);
}

TEST(CompletionWorkTest, WaitWakesOnCompletionFromAnotherThread) {
  CompletionWork work;
  std::thread t([&] { work.Complete(absl::OkStatus()); });
  EXPECT_OK(work.Wait(absl::Seconds(10)));
  t.join();
}

}  // namespace
}  // namespace pshard::worker
