#include "coordinator/event_log.h"

#include "common/proto_time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

v1::JobEvent StateChange(v1::JobState to) {
  v1::JobEvent e;
  e.mutable_state_change()->set_to(to);
  return e;
}

TEST(EventLogTest, AppendNumbersStampsAndWakesTheWaitsOnce) {
  EventLog log;
  log.AddWaiter(4);
  log.AddWaiter(9);
  EXPECT_THAT(log.Append(StateChange(v1::QUEUED), kT0), ElementsAre(4, 9));
  EXPECT_EQ(log.last().sequence(), 1);
  EXPECT_EQ(FromProto(log.last().time()), kT0);
  EXPECT_THAT(log.Append(StateChange(v1::STARTING), kT0 + absl::Seconds(1)),
              IsEmpty());
  EXPECT_EQ(log.last().sequence(), 2);
  EXPECT_EQ(log.size(), 2);
}

TEST(EventLogTest, ReadReturnsEventsAfterASequenceUpToMax) {
  EventLog log;
  for (v1::JobState s : {v1::QUEUED, v1::STARTING, v1::RUNNING}) {
    log.Append(StateChange(s), kT0);
  }
  std::vector<v1::JobEvent> read = log.Read(1, 1);
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].sequence(), 2);
  EXPECT_EQ(log.Read(0, 100).size(), 3u);
  EXPECT_THAT(log.Read(3, 100), IsEmpty());
  EXPECT_TRUE(log.HasEventAfter(2));
  EXPECT_FALSE(log.HasEventAfter(3));
}

TEST(EventLogTest, RestoreContinuesTheNumbering) {
  EventLog log;
  std::vector<v1::JobEvent> stored(2);
  stored[0].set_sequence(1);
  stored[1].set_sequence(2);
  log.Restore(stored);
  log.Append(StateChange(v1::FAILED), kT0);
  EXPECT_EQ(log.last().sequence(), 3);
}

TEST(EventLogTest, ProgressIsThrottledByTheInterval) {
  EventLog log;
  const absl::Duration interval = absl::Seconds(1);
  // Never sent: due at once.
  EXPECT_TRUE(log.ProgressDue(kT0, interval));
  log.NoteProgress();
  EXPECT_TRUE(log.progress_dirty());
  v1::JobProgress p;
  p.set_step(5);
  v1::JobEvent e = log.TakeProgressEvent(p, kT0);
  EXPECT_FALSE(log.progress_dirty());
  EXPECT_EQ(e.progress().step(), 5);
  EXPECT_FALSE(log.ProgressDue(kT0 + absl::Milliseconds(999), interval));
  EXPECT_TRUE(log.ProgressDue(kT0 + interval, interval));
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
