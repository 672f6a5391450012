#include "worker/comm/work_impl.h"

#include <memory>
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

TEST(AllOfTest, CompletesWhenTheLastPartDoesWithTheFirstFailure) {
  auto a = std::make_shared<CompletionWork>();
  auto b = std::make_shared<CompletionWork>();
  auto c = std::make_shared<CompletionWork>();
  std::shared_ptr<Work> all = AllOf({a, b, c});
  int calls = 0;
  all->OnCompletion([&](absl::Status) { ++calls; });
  // Parts finish out of order: the join waits for every one.
  c->Complete(absl::UnavailableError("c failed"));
  a->Complete(absl::OkStatus());
  EXPECT_FALSE(all->IsCompleted());
  b->Complete(absl::AbortedError("b failed later"));
  EXPECT_TRUE(all->IsCompleted());
  EXPECT_EQ(calls, 1);
  EXPECT_THAT(all->Wait(absl::Seconds(1)),
              StatusIs(absl::StatusCode::kUnavailable, "c failed"));
}

TEST(AllOfTest, OnePartIsItselfAndNoneIsDone) {
  auto only = std::make_shared<CompletionWork>();
  EXPECT_EQ(AllOf({only}).get(), only.get());
  std::shared_ptr<Work> none = AllOf({});
  EXPECT_TRUE(none->IsCompleted());
  EXPECT_OK(none->Wait(absl::ZeroDuration()));
}

TEST(AllOfTest, PartsAlreadyFinishedGiveAFinishedJoin) {
  std::shared_ptr<Work> all =
      AllOf({CompletionWork::Done(absl::OkStatus()),
             CompletionWork::Done(absl::OkStatus())});
  EXPECT_TRUE(all->IsCompleted());
  EXPECT_OK(all->Wait(absl::ZeroDuration()));
}

}  // namespace
}  // namespace pshard::worker
