#include "worker/comm/rank_threads.h"

#include <atomic>

#include "absl/synchronization/barrier.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

// Every rank runs at once: a barrier that needs all of them is passed.
TEST(RunRanksTest, RunsEveryRankConcurrently) {
  for (int world : {1, 2, 5}) {
    auto* barrier = new absl::Barrier(world);  // deleted by the last to pass
    std::atomic<int> sum{0};
    std::vector<absl::Status> statuses = RunRanks(world, [&](int rank) {
      if (barrier->Block()) delete barrier;
      sum += rank;
      return absl::OkStatus();
    });
    EXPECT_EQ(statuses.size(), static_cast<size_t>(world));
    EXPECT_OK(FirstError(statuses));
    EXPECT_EQ(sum.load(), world * (world - 1) / 2);
  }
}

TEST(RunRanksTest, FirstErrorNamesTheLowestFailingRank) {
  std::vector<absl::Status> statuses = RunRanks(4, [](int rank) {
    return rank >= 2 ? absl::InternalError("boom") : absl::OkStatus();
  });
  EXPECT_OK(statuses[0]);
  EXPECT_THAT(statuses[3], StatusIs(absl::StatusCode::kInternal, "boom"));
  EXPECT_THAT(FirstError(statuses),
              StatusIs(absl::StatusCode::kInternal, "rank 2: boom"));
}

TEST(RunRanksTest, RunRanksForCollectsValuesInRankOrder) {
  ASSERT_OK_AND_ASSIGN(std::vector<int> squares,
                       RunRanksFor<int>(3, [](int rank) -> absl::StatusOr<int> {
                         return rank * rank;
                       }));
  EXPECT_EQ(squares, (std::vector<int>{0, 1, 4}));
  EXPECT_THAT(RunRanksFor<int>(3,
                               [](int rank) -> absl::StatusOr<int> {
                                 if (rank == 1) {
                                   return absl::UnavailableError("down");
                                 }
                                 return rank;
                               })
                  .status(),
              StatusIs(absl::StatusCode::kUnavailable, "rank 1: down"));
}

TEST(CreateGlooRanksTest, ConnectsAWorld) {
  InMemoryKvStore kv;
  GlooOptions options;
  options.timeout = absl::Seconds(20);
  ASSERT_OK_AND_ASSIGN(auto comms, CreateGlooRanks(3, options, kv));
  ASSERT_EQ(comms.size(), 3u);
  std::vector<absl::Status> statuses = RunRanks(3, [&](int rank) {
    float x = static_cast<float>(rank + 1);
    absl::Status status =
        comms[rank]->AllReduce(&x, 1, DataType::kFloat32)->Wait(absl::Seconds(20));
    if (status.ok() && x != 6.0f) status = absl::InternalError("wrong sum");
    return status;
  });
  EXPECT_OK(FirstError(statuses));
}

}  // namespace
}  // namespace pshard::worker
