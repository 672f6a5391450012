#include "coordinator/scheduler.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Not;

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

// Ranks on one host are contiguous, and the job spans the fewest hosts the
// idle workers allow: here four 2-rank nodes (a, b, c, d; two --local_ranks
// supervisors' children each) and two single workers (e, f), registered
// interleaved.
TEST(PlaceRanksTest, NodeByNodeOnTheFewestHosts) {
  std::vector<IdleWorker> idle = {{1, "a"}, {2, "e"}, {3, "b"}, {4, "c"},
                                  {5, "a"}, {6, "f"}, {7, "b"}, {8, "d"},
                                  {9, "c"}, {10, "d"}};
  for (int world = 1; world <= 10; ++world) {
    const std::vector<int64_t> placed = PlaceRanks(idle, world);
    ASSERT_EQ(static_cast<int>(placed.size()), world);
    std::map<int64_t, std::string> host_of;
    for (const IdleWorker& w : idle) host_of[w.num] = w.host;
    std::vector<std::string> hosts;
    for (int64_t num : placed) {
      const std::string& host = host_of[num];
      if (hosts.empty() || hosts.back() != host) {
        // A host, once left, never comes back.
        EXPECT_THAT(hosts, Not(Contains(host))) << "world " << world;
        hosts.push_back(host);
      }
    }
    // Fewest hosts: full 2-worker nodes first.
    const int fewest = world <= 8 ? (world + 1) / 2 : 4 + (world - 8);
    EXPECT_EQ(static_cast<int>(hosts.size()), fewest) << "world " << world;
  }
  EXPECT_THAT(PlaceRanks(idle, 4), ElementsAre(1, 5, 3, 7));
}

TEST(LocalRanksTest, IndexAndCountAmongTheRanksOfEachHost) {
  std::vector<LocalRank> local = LocalRanks({"a", "a", "b", "c", "c", "c"});
  ASSERT_EQ(local.size(), 6u);
  const int want[][2] = {{0, 2}, {1, 2}, {0, 1}, {0, 3}, {1, 3}, {2, 3}};
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(local[r].local_rank, want[r][0]) << "rank " << r;
    EXPECT_EQ(local[r].local_world_size, want[r][1]) << "rank " << r;
  }
  // Defined (rank order per host) even where a host's ranks are not
  // contiguous.
  local = LocalRanks({"a", "b", "a"});
  EXPECT_EQ(local[2].local_rank, 1);
  EXPECT_EQ(local[2].local_world_size, 2);
  EXPECT_EQ(local[1].local_world_size, 1);
  EXPECT_TRUE(LocalRanks({}).empty());
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
