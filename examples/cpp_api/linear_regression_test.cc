#include "examples/cpp_api/linear_regression.h"

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace pshard::examples {
namespace {

TEST(CppApiExampleTest, TwoRanksLearnAndShareTheState) {
  ASSERT_OK_AND_ASSIGN(ExampleResult result,
                       RunLinearRegression(/*world_size=*/2, /*steps=*/150,
                                           /*verbose=*/false));
  EXPECT_LT(result.final_loss, result.initial_loss / 10);
  // Two buckets (bias, weight), one per rank: each holds only its own Adam
  // state (2 floats per owned element).
  ASSERT_EQ(result.owned_buckets.size(), 2u);
  EXPECT_EQ(result.owned_buckets[0] + result.owned_buckets[1], 2);
  EXPECT_EQ(result.state_bytes[0] + result.state_bytes[1], (64 + 4) * 8);
  EXPECT_GT(result.state_bytes[0], 0);
  EXPECT_GT(result.state_bytes[1], 0);
}

TEST(CppApiExampleTest, SingleRankMatchesTheSameLoop) {
  ASSERT_OK_AND_ASSIGN(ExampleResult result,
                       RunLinearRegression(1, 150, false));
  EXPECT_LT(result.final_loss, result.initial_loss / 10);
  EXPECT_EQ(result.state_bytes[0], (64 + 4) * 8);
}

}  // namespace
}  // namespace pshard::examples
