#include "worker/hook/local_assignment.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

using ::testing::ElementsAre;

TEST(LocalAssignmentTest, RoundRobinIsIndexModWorld) {
  std::vector<int64_t> bytes = {10, 20, 30, 40, 50};
  ASSERT_OK_AND_ASSIGN(auto owners,
                       LocalAssignBuckets(v1::JobSpec::ROUND_ROBIN, bytes, 2));
  EXPECT_THAT(owners, ElementsAre(0, 1, 0, 1, 0));
}

TEST(LocalAssignmentTest, BalancedPutsLargestFirstOnLightestRank) {
  // 100 -> r0; 60 -> r1; 50 -> r1 (110); 40 -> r0 (140); round-robin
  // would load r1 with 160.
  std::vector<int64_t> bytes = {40, 100, 50, 60};
  ASSERT_OK_AND_ASSIGN(auto owners,
                       LocalAssignBuckets(v1::JobSpec::BALANCED, bytes, 2));
  EXPECT_THAT(owners, ElementsAre(0, 0, 1, 1));
}

TEST(LocalAssignmentTest, BalancedTiesGoToLowerBucketAndRank) {
  std::vector<int64_t> bytes = {8, 8, 8};
  ASSERT_OK_AND_ASSIGN(auto owners,
                       LocalAssignBuckets(v1::JobSpec::BALANCED, bytes, 3));
  EXPECT_THAT(owners, ElementsAre(0, 1, 2));
}

TEST(LocalAssignmentTest, RejectsBadInput) {
  std::vector<int64_t> bytes = {8, -1};
  EXPECT_THAT(LocalAssignBuckets(v1::JobSpec::BALANCED, bytes, 2).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("bucket 1")));
  EXPECT_THAT(LocalAssignBuckets(v1::JobSpec::BALANCED, {}, 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

}  // namespace
}  // namespace pshard::worker
