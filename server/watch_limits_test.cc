#include "server/watch_limits.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace server {
namespace {

using ::testing::HasSubstr;

TEST(PeerHostTest, StripsThePort) {
  EXPECT_EQ(PeerHost("ipv4:10.1.2.3:5000"), "10.1.2.3");
  EXPECT_EQ(PeerHost("ipv6:[::1]:5000"), "::1");
  EXPECT_EQ(PeerHost("ipv6:[2001:db8::7]:443"), "2001:db8::7");
  EXPECT_EQ(PeerHost("ipv6:::1"), "::1");
  EXPECT_EQ(PeerHost("unix:/run/pshard.sock"), "unix:/run/pshard.sock");
  EXPECT_EQ(PeerHost(""), "");
}

TEST(WatchLimitsTest, EachClientHasItsOwnCap) {
  WatchLimits limits(/*per_client=*/2, /*total=*/10);
  EXPECT_OK(limits.Open("a"));
  EXPECT_OK(limits.Open("a"));
  EXPECT_THAT(limits.Open("a"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("too many WatchJob streams from a (2 per "
                                 "client, max_watchers_per_client)")));
  // Another client is not held back by the first one.
  EXPECT_OK(limits.Open("b"));
  EXPECT_EQ(limits.open(), 3);
  EXPECT_EQ(limits.open_by("a"), 2);
  limits.Close("a");
  EXPECT_OK(limits.Open("a"));
}

TEST(WatchLimitsTest, TheTotalCapsEveryClientTogether) {
  WatchLimits limits(/*per_client=*/2, /*total=*/3);
  EXPECT_OK(limits.Open("a"));
  EXPECT_OK(limits.Open("b"));
  EXPECT_OK(limits.Open("c"));
  EXPECT_THAT(limits.Open("d"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("too many WatchJob streams (3, "
                                 "max_watchers)")));
  limits.Close("b");
  EXPECT_EQ(limits.open_by("b"), 0);
  EXPECT_OK(limits.Open("d"));
  // Closing what never opened changes nothing.
  limits.Close("nobody");
  EXPECT_EQ(limits.open(), 3);
}

}  // namespace
}  // namespace server
}  // namespace pshard
