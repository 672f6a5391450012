#include "coordinator/notifier.h"

#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::ElementsAre;

TEST(NotifierTest, RunsBatchesInOrderOffTheCallersThread) {
  Notifier notifier;
  absl::Mutex mu;
  std::vector<int> ran;
  const std::thread::id caller = std::this_thread::get_id();
  bool on_caller = false;
  auto record = [&](int n) {
    return [&, n] {
      absl::MutexLock lock(&mu);
      ran.push_back(n);
      on_caller |= std::this_thread::get_id() == caller;
    };
  };
  notifier.Post({record(1), record(2)});
  notifier.Post({record(3)});
  ASSERT_TRUE(notifier.WaitIdle(absl::Seconds(30)));
  absl::MutexLock lock(&mu);
  EXPECT_THAT(ran, ElementsAre(1, 2, 3));
  EXPECT_FALSE(on_caller);
}

TEST(NotifierTest, WaitIdleTimesOutWhileABatchIsRunning) {
  Notifier notifier;
  absl::Notification release;
  notifier.Post({[&] { release.WaitForNotification(); }});
  EXPECT_FALSE(notifier.WaitIdle(absl::Milliseconds(10)));
  release.Notify();
  EXPECT_TRUE(notifier.WaitIdle(absl::Seconds(30)));
}

TEST(NotifierTest, DestructorRunsWhatIsQueued) {
  int ran = 0;
  {
    Notifier notifier;
    absl::Notification release;
    notifier.Post({[&] { release.WaitForNotification(); }});
    notifier.Post({[&] { ++ran; }, [&] { ++ran; }});
    release.Notify();
  }
  EXPECT_EQ(ran, 2);
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
