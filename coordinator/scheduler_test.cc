#include "coordinator/scheduler.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(PlaceRanksTest, AllOrNothing) {
  EXPECT_THAT(PlaceRanks({{1, "a"}, {2, "a"}}, 3), IsEmpty());
  EXPECT_THAT(PlaceRanks({}, 1), IsEmpty());
  EXPECT_THAT(PlaceRanks({{1, "a"}}, 0), IsEmpty());
}

TEST(PlaceRanksTest, GroupsRanksByHostFullestFirst) {
  // Host b has 3 idle workers, a and c one each.
  std::vector<IdleWorker> idle = {
      {1, "a"}, {2, "b"}, {3, "c"}, {4, "b"}, {5, "b"}};
  EXPECT_THAT(PlaceRanks(idle, 4), ElementsAre(2, 4, 5, 1));
  EXPECT_THAT(PlaceRanks(idle, 5), ElementsAre(2, 4, 5, 1, 3));
  EXPECT_THAT(PlaceRanks(idle, 2), ElementsAre(2, 4));
}

TEST(PlaceRanksTest, DeterministicTies) {
  std::vector<IdleWorker> idle = {{9, "y"}, {3, "x"}, {8, "y"}, {4, "x"}};
  EXPECT_THAT(PlaceRanks(idle, 3), ElementsAre(3, 4, 8));
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
