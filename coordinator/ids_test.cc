#include "coordinator/ids.h"

#include "gtest/gtest.h"

namespace pshard {
namespace coordinator {
namespace {

TEST(IdsTest, IdsRoundTripInCanonicalDecimalOnly) {
  EXPECT_EQ(WorkerId(7), "w-7");
  EXPECT_EQ(JobId(12), "job-12");
  EXPECT_EQ(ParseWorkerId("w-7"), 7);
  EXPECT_EQ(ParseJobId("job-12"), 12);
  for (const char* bad : {"w-", "w-0", "w-01", "w-+1", "w-1x", "job-1", "w-1234567890123456789"}) {
    EXPECT_EQ(ParseWorkerId(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(ParseJobId("w-1"), std::nullopt);
}

TEST(IdsTest, ClipBoundsAndBlanksControlCharacters) {
  EXPECT_EQ(Clip("a\tb\nc"), "a b\nc");
  EXPECT_EQ(Clip("abcdef", 3), "abc");
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
