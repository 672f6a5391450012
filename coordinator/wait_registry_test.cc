#include "coordinator/wait_registry.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(WaitRegistryTest, TakeReturnsAParkedWaitOnceWithItsCallback) {
  WaitRegistry waits(10);
  std::optional<absl::StatusOr<std::vector<KvValue>>> got;
  const WaitId id = waits.Park(
      KvWait{7, 2, KvRead{{"k"}},
             [&](absl::StatusOr<std::vector<KvValue>> v) { got = v; }},
      kT0 + absl::Seconds(5));
  EXPECT_NE(id, 0u);
  EXPECT_EQ(waits.size(), 1u);
  // Another kind at that id: nothing taken.
  EXPECT_FALSE(waits.Take<EventsWait>(id).has_value());
  std::optional<KvWait> kv = waits.Take<KvWait>(id);
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->job_num, 7);
  EXPECT_EQ(kv->epoch, 2);
  EXPECT_EQ(kv->read.keys, std::vector<std::string>{"k"});
  kv->done(std::vector<KvValue>{std::make_shared<const std::string>("v")});
  ASSERT_TRUE(got.has_value());
  ASSERT_EQ((*got)->size(), 1u);
  EXPECT_EQ(*(*got)->front(), "v");
  EXPECT_EQ(waits.size(), 0u);
  EXPECT_FALSE(waits.Take<KvWait>(id).has_value());
}

TEST(WaitRegistryTest, FindLeavesTheWaitInPlace) {
  WaitRegistry waits(10);
  const WaitId id = waits.Park(LayoutWait{1, 1, 3, "fp", nullptr}, kT0);
  LayoutWait* w = waits.Find<LayoutWait>(id);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->rank, 3);
  EXPECT_EQ(waits.Find<KvWait>(id), nullptr);
  EXPECT_EQ(waits.size(), 1u);
}

TEST(WaitRegistryTest, ExpiryIsEarliestFirstAndSkipsWaitsAlreadyGone) {
  WaitRegistry waits(10);
  const WaitId late = waits.Park(EventsWait{1, nullptr}, kT0 + absl::Seconds(3));
  const WaitId early = waits.Park(KvWait{2, 1, {}, nullptr}, kT0 + absl::Seconds(1));
  const WaitId cancelled =
      waits.Park(AssignmentWait{3, 1, true, nullptr}, kT0 + absl::Seconds(2));
  const WaitId taken = waits.Park(EventsWait{4, nullptr}, kT0 + absl::Seconds(2));
  const WaitId later = waits.Park(EventsWait{5, nullptr}, kT0 + absl::Seconds(9));
  waits.Cancel(cancelled);
  waits.Cancel(cancelled);  // a no-op the second time
  ASSERT_TRUE(waits.Take<EventsWait>(taken).has_value());
  EXPECT_TRUE(waits.TakeExpired(kT0).empty());

  std::vector<Wait> expired = waits.TakeExpired(kT0 + absl::Seconds(3));
  ASSERT_EQ(expired.size(), 2u);
  EXPECT_EQ(std::get<KvWait>(expired[0]).job_num, 2);
  EXPECT_EQ(std::get<EventsWait>(expired[1]).job_num, 1);
  EXPECT_FALSE(waits.Take<KvWait>(early).has_value());
  EXPECT_FALSE(waits.Take<EventsWait>(late).has_value());
  EXPECT_EQ(waits.size(), 1u);
  EXPECT_NE(waits.Find<EventsWait>(later), nullptr);
}

TEST(WaitRegistryTest, CapacityCountsPendingWaits) {
  WaitRegistry waits(2);
  EXPECT_OK(waits.CheckCapacity());
  const WaitId a = waits.Park(EventsWait{1, nullptr}, kT0);
  waits.Park(EventsWait{1, nullptr}, kT0);
  EXPECT_THAT(waits.CheckCapacity(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("too many pending waits (2)")));
  waits.Cancel(a);
  EXPECT_OK(waits.CheckCapacity());
}

TEST(WaitRegistryTest, TakeAllEmptiesTheRegistryInIdOrder) {
  WaitRegistry waits(10);
  waits.Park(EventsWait{1, nullptr}, kT0 + absl::Seconds(9));
  waits.Park(KvWait{2, 1, {}, nullptr}, kT0);
  std::vector<Wait> all = waits.TakeAll();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<EventsWait>(all[0]));
  EXPECT_TRUE(std::holds_alternative<KvWait>(all[1]));
  EXPECT_EQ(waits.size(), 0u);
  EXPECT_TRUE(waits.TakeExpired(absl::InfiniteFuture()).empty());
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
