#include "shard/assignment.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "shard/layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace shard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kMB = 1 << 20;

TEST(AssignmentTest, RoundRobinIsIndexModWorld) {
  ASSERT_OK_AND_ASSIGN(std::vector<int> owners,
                       AssignBuckets(v1::JobSpec::ROUND_ROBIN,
                                     {5, 1, 1, 1, 1, 9, 2}, 3));
  EXPECT_THAT(owners, ElementsAre(0, 1, 2, 0, 1, 2, 0));
}

TEST(AssignmentTest, BalancedLargestFirstOntoLeastLoaded) {
  // 8 -> r0, 7 -> r1, 3 -> r1 (7 < 8), 2 -> r0 (8 < 10): loads 10, 10.
  ASSERT_OK_AND_ASSIGN(std::vector<int> owners,
                       AssignBuckets(v1::JobSpec::BALANCED, {2, 8, 3, 7}, 2));
  EXPECT_THAT(owners, ElementsAre(0, 0, 1, 1));
  EXPECT_DOUBLE_EQ(Imbalance(OwnedBytes({2, 8, 3, 7}, owners, 2)), 1.0);
}

TEST(AssignmentTest, BalancedTiesGoToLowerIndexAndLowerRank) {
  ASSERT_OK_AND_ASSIGN(std::vector<int> owners,
                       AssignBuckets(v1::JobSpec::BALANCED, {4, 4, 4, 4}, 4));
  EXPECT_THAT(owners, ElementsAre(0, 1, 2, 3));
}

TEST(AssignmentTest, UnspecifiedMeansBalanced) {
  const std::vector<int64_t> bytes = {9, 1, 1, 1, 8, 2};
  ASSERT_OK_AND_ASSIGN(auto a, AssignBuckets(v1::JobSpec::BALANCED, bytes, 3));
  ASSERT_OK_AND_ASSIGN(
      auto b, AssignBuckets(v1::JobSpec::ASSIGNMENT_POLICY_UNSPECIFIED, bytes, 3));
  EXPECT_EQ(a, b);
}

TEST(AssignmentTest, BalancedNeverWorseThanRoundRobinOnKnownGreedyTrap) {
  // Greedy alone gives 7 (3+2+2 | 3+2); round robin gets 6 | 6 here.
  const std::vector<int64_t> bytes = {2, 3, 2, 3, 2};
  ASSERT_OK_AND_ASSIGN(auto rr, AssignBuckets(v1::JobSpec::ROUND_ROBIN, bytes, 2));
  ASSERT_OK_AND_ASSIGN(auto bal, AssignBuckets(v1::JobSpec::BALANCED, bytes, 2));
  EXPECT_LE(Imbalance(OwnedBytes(bytes, bal, 2)),
            Imbalance(OwnedBytes(bytes, rr, 2)));
  EXPECT_DOUBLE_EQ(Imbalance(OwnedBytes(bytes, bal, 2)), 1.0);
}

TEST(AssignmentTest, MoreRanksThanBuckets) {
  ASSERT_OK_AND_ASSIGN(auto owners,
                       AssignBuckets(v1::JobSpec::BALANCED, {5, 7}, 4));
  EXPECT_THAT(owners, ElementsAre(1, 0));
  EXPECT_DOUBLE_EQ(Imbalance(OwnedBytes({5, 7}, owners, 4)), 7.0 / 3.0);
}

TEST(AssignmentTest, EmptyLayoutAndZeroBytes) {
  ASSERT_OK_AND_ASSIGN(auto owners, AssignBuckets(v1::JobSpec::BALANCED, {}, 4));
  EXPECT_TRUE(owners.empty());
  EXPECT_DOUBLE_EQ(Imbalance(OwnedBytes({}, owners, 4)), 1.0);
  EXPECT_DOUBLE_EQ(Imbalance({}), 1.0);
}

TEST(AssignmentTest, BadInput) {
  EXPECT_THAT(AssignBuckets(v1::JobSpec::BALANCED, {1}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("world_size")));
  EXPECT_THAT(AssignBuckets(v1::JobSpec::BALANCED, {1, -2}, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bucket 1")));
  EXPECT_THAT(AssignBuckets(static_cast<v1::JobSpec::AssignmentPolicy>(42), {1}, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("policy")));
}

TEST(AssignmentTest, Deterministic) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> size(1, 1000);
  std::vector<int64_t> bytes(500);
  for (auto& b : bytes) b = size(rng);
  ASSERT_OK_AND_ASSIGN(auto a, AssignBuckets(v1::JobSpec::BALANCED, bytes, 16));
  ASSERT_OK_AND_ASSIGN(auto b, AssignBuckets(v1::JobSpec::BALANCED, bytes, 16));
  EXPECT_EQ(a, b);
}

// The property: 100 buckets of 1-25 MB over 8 ranks, over many random
// layouts: balanced <= 1.05 and never worse than round_robin.
TEST(AssignmentPropertyTest, BalancedWithinFivePercentAndNeverWorseThanRoundRobin) {
  std::mt19937_64 rng(20240601);
  std::uniform_int_distribution<int64_t> size(1 * kMB, 25 * kMB);
  double worst = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int64_t> bytes(100);
    for (auto& b : bytes) b = size(rng);
    ASSERT_OK_AND_ASSIGN(auto rr, AssignBuckets(v1::JobSpec::ROUND_ROBIN, bytes, 8));
    ASSERT_OK_AND_ASSIGN(auto bal, AssignBuckets(v1::JobSpec::BALANCED, bytes, 8));
    const double rr_imb = Imbalance(OwnedBytes(bytes, rr, 8));
    const double bal_imb = Imbalance(OwnedBytes(bytes, bal, 8));
    ASSERT_LE(bal_imb, 1.05) << "trial " << trial;
    ASSERT_LE(bal_imb, rr_imb) << "trial " << trial;
    worst = std::max(worst, bal_imb);
  }
  RecordProperty("worst_balanced_imbalance", std::to_string(worst));
}

// Never worse than round_robin on adversarial shapes too: few buckets, many
// ranks, heavy tails, equal sizes.
TEST(AssignmentPropertyTest, NeverWorseThanRoundRobinOnOddShapes) {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 40)(rng);
    const int world = std::uniform_int_distribution<int>(1, 12)(rng);
    const int shape = trial % 3;
    std::vector<int64_t> bytes(n);
    for (auto& b : bytes) {
      if (shape == 0) b = std::uniform_int_distribution<int64_t>(1, 4)(rng);
      if (shape == 1) b = int64_t{1} << std::uniform_int_distribution<int>(0, 30)(rng);
      if (shape == 2) b = std::uniform_int_distribution<int64_t>(0, 100)(rng);
    }
    ASSERT_OK_AND_ASSIGN(auto rr, AssignBuckets(v1::JobSpec::ROUND_ROBIN, bytes, world));
    ASSERT_OK_AND_ASSIGN(auto bal, AssignBuckets(v1::JobSpec::BALANCED, bytes, world));
    ASSERT_LE(Imbalance(OwnedBytes(bytes, bal, world)),
              Imbalance(OwnedBytes(bytes, rr, world)))
        << "trial " << trial;
  }
}

Layout MakeLayout(const std::vector<std::vector<std::pair<std::string, int64_t>>>& buckets) {
  Layout layout;
  for (size_t i = 0; i < buckets.size(); ++i) {
    v1::BucketLayout* b = layout.Add();
    b->set_index(static_cast<int>(i));
    for (const auto& [name, n] : buckets[i]) {
      v1::BucketParameter* p = b->add_parameters();
      p->set_name(name);
      p->set_num_elements(n);
      p->set_dtype("F32");
    }
  }
  return layout;
}

TEST(LayoutTest, ValidateRejectsBadReports) {
  LayoutLimits limits;
  EXPECT_OK(ValidateLayout(MakeLayout({{{"a", 4}}, {{"b", 2}, {"c", 3}}}), limits));
  EXPECT_THAT(ValidateLayout(Layout(), limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least one")));
  Layout bad_index = MakeLayout({{{"a", 4}}, {{"b", 1}}});
  bad_index[1].set_index(5);
  EXPECT_THAT(ValidateLayout(bad_index, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("buckets[1].index")));
  Layout empty_bucket = MakeLayout({{{"a", 4}}, {}});
  EXPECT_THAT(ValidateLayout(empty_bucket, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("buckets[1].parameters")));
  Layout long_name = MakeLayout({{{std::string(257, 'x'), 4}}});
  EXPECT_THAT(ValidateLayout(long_name, limits),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("buckets[0].parameters[0].name")));
  Layout zero = MakeLayout({{{"a", 0}}});
  EXPECT_THAT(ValidateLayout(zero, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_elements")));
  Layout dtype = MakeLayout({{{"a", 1}}});
  dtype[0].mutable_parameters(0)->set_dtype("I8");
  EXPECT_THAT(ValidateLayout(dtype, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dtype")));
  limits.max_buckets = 1;
  EXPECT_THAT(ValidateLayout(MakeLayout({{{"a", 1}}, {{"b", 1}}}), limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 1")));
}

TEST(LayoutTest, CompareNamesFirstDifferingBucket) {
  Layout a = MakeLayout({{{"a", 4}}, {{"b", 2}, {"c", 3}}, {{"d", 1}}});
  EXPECT_FALSE(CompareLayouts(a, a).has_value());
  Layout b = MakeLayout({{{"a", 4}}, {{"b", 2}, {"c", 5}}, {{"x", 1}}});
  auto diff = CompareLayouts(a, b);
  ASSERT_TRUE(diff.has_value());
  EXPECT_EQ(diff->bucket, 1);
  EXPECT_THAT(diff->detail, HasSubstr("\"c\" has 5 elements instead of 3"));
  Layout shorter = MakeLayout({{{"a", 4}}, {{"b", 2}, {"c", 3}}});
  diff = CompareLayouts(a, shorter);
  ASSERT_TRUE(diff.has_value());
  EXPECT_EQ(diff->bucket, 2);
  Layout renamed = MakeLayout({{{"z", 4}}, {{"b", 2}, {"c", 3}}, {{"d", 1}}});
  diff = CompareLayouts(a, renamed);
  ASSERT_TRUE(diff.has_value());
  EXPECT_EQ(diff->bucket, 0);
  EXPECT_THAT(diff->detail, HasSubstr("\"z\" instead of \"a\""));
}

TEST(LayoutTest, BuildShardAssignment) {
  Layout layout = MakeLayout({{{"a", 4}}, {{"b", 2}, {"c", 3}}, {{"d", 1}}});
  layout[2].mutable_parameters(0)->set_dtype("BF16");
  google::protobuf::RepeatedPtrField<v1::JobMember> members;
  members.Add()->set_worker_id("w-7");
  members.Add()->set_worker_id("w-9");
  ASSERT_OK_AND_ASSIGN(
      v1::ShardAssignment a,
      BuildShardAssignment("job-1", 3, v1::JobSpec::ROUND_ROBIN, layout, members));
  EXPECT_EQ(a.job_id(), "job-1");
  EXPECT_EQ(a.epoch(), 3);
  ASSERT_EQ(a.buckets_size(), 3);
  EXPECT_EQ(a.buckets(1).bytes(), 20);
  EXPECT_EQ(a.buckets(1).num_elements(), 5);
  EXPECT_THAT(a.buckets(1).parameter_names(), ElementsAre("b", "c"));
  EXPECT_EQ(a.buckets(1).owner_worker_id(), "w-9");
  EXPECT_EQ(a.buckets(2).bytes(), 2);
  EXPECT_EQ(a.total_bytes(), 38);
  ASSERT_EQ(a.ranks_size(), 2);
  EXPECT_EQ(a.ranks(0).owned_bytes(), 18);
  EXPECT_EQ(a.ranks(0).num_buckets(), 2);
  EXPECT_EQ(a.ranks(1).owned_bytes(), 20);
  EXPECT_DOUBLE_EQ(a.imbalance(), 20.0 / 19.0);
  EXPECT_EQ(a.policy(), v1::JobSpec::ROUND_ROBIN);
}

TEST(LayoutTest, OwnersViewKeepsOnlyWhatARankNeeds) {
  Layout layout = MakeLayout({{{"a", 4}}, {{"b", 2}, {"c", 3}}, {{"d", 1}}});
  google::protobuf::RepeatedPtrField<v1::JobMember> members;
  members.Add()->set_worker_id("w-7");
  members.Add()->set_worker_id("w-9");
  ASSERT_OK_AND_ASSIGN(
      v1::ShardAssignment full,
      BuildShardAssignment("job-1", 3, v1::JobSpec::BALANCED, layout, members));
  const v1::ShardAssignment owners = OwnersView(full);
  EXPECT_EQ(owners.job_id(), "job-1");
  EXPECT_EQ(owners.epoch(), 3);
  EXPECT_EQ(owners.policy(), v1::JobSpec::BALANCED);
  EXPECT_DOUBLE_EQ(owners.imbalance(), full.imbalance());
  EXPECT_EQ(owners.total_bytes(), full.total_bytes());
  EXPECT_EQ(owners.ranks_size(), 0);
  ASSERT_EQ(owners.buckets_size(), 3);
  for (int b = 0; b < 3; ++b) {
    v1::BucketAssignment expected;
    expected.set_index(full.buckets(b).index());
    expected.set_owner_rank(full.buckets(b).owner_rank());
    EXPECT_EQ(owners.buckets(b).SerializeAsString(), expected.SerializeAsString())
        << "bucket " << b;
  }
  EXPECT_LT(owners.ByteSizeLong(), full.ByteSizeLong() / 2);
}

TEST(ShardRangesTest, TileTheBucketAlignedAndEven) {
  for (int world : {1, 2, 3, 4, 7, 64}) {
    for (int64_t numel : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{16},
                          int64_t{17}, int64_t{100}, int64_t{1000003},
                          int64_t{86786}}) {
      const std::vector<ElementRange> ranges = ShardRanges(numel, world);
      ASSERT_EQ(ranges.size(), static_cast<size_t>(world));
      int64_t at = 0;
      int64_t smallest = numel, largest = 0;
      for (int r = 0; r < world; ++r) {
        SCOPED_TRACE(testing::Message() << "numel " << numel << " world "
                                        << world << " rank " << r);
        EXPECT_EQ(ranges[r].begin, at);
        EXPECT_LE(ranges[r].begin, ranges[r].end);
        if (ranges[r].end != numel) {
          EXPECT_EQ(ranges[r].end % kShardAlignElements, 0);
        }
        at = ranges[r].end;
        smallest = std::min(smallest, ranges[r].size());
        largest = std::max(largest, ranges[r].size());
      }
      EXPECT_EQ(at, numel);
      EXPECT_LE(largest - smallest, kShardAlignElements)
          << "numel " << numel << " world " << world;
    }
  }
}

TEST(ShardRangesTest, KnownSplits) {
  EXPECT_THAT(ShardRanges(100, 2),
              ElementsAre(ElementRange{0, 48}, ElementRange{48, 100}));
  EXPECT_THAT(ShardRanges(20, 4),
              ElementsAre(ElementRange{0, 0}, ElementRange{0, 0},
                          ElementRange{0, 16}, ElementRange{16, 20}));
  EXPECT_THAT(ShardRanges(96, 3),
              ElementsAre(ElementRange{0, 32}, ElementRange{32, 64},
                          ElementRange{64, 96}));
}

TEST(AssignmentTest, ShardedGivesEveryBucketToEveryRank) {
  ASSERT_OK_AND_ASSIGN(std::vector<int> owners,
                       AssignBuckets(v1::JobSpec::SHARDED, {40, 4, 400}, 3));
  EXPECT_THAT(owners, ElementsAre(kEveryRank, kEveryRank, kEveryRank));
}

TEST(LayoutTest, ShardedAssignmentPublishesRanges) {
  // "w" (256 elements) dwarfs the rest: BALANCED cannot split it, SHARDED
  // does.
  Layout layout =
      MakeLayout({{{"bias", 10}, {"w", 256}}, {{"b", 30}, {"c", 3}}});
  google::protobuf::RepeatedPtrField<v1::JobMember> members;
  members.Add()->set_worker_id("w-7");
  members.Add()->set_worker_id("w-9");
  ASSERT_OK_AND_ASSIGN(
      v1::ShardAssignment a,
      BuildShardAssignment("job-1", 2, v1::JobSpec::SHARDED, layout, members));
  EXPECT_EQ(a.policy(), v1::JobSpec::SHARDED);
  ASSERT_EQ(a.buckets_size(), 2);
  const v1::BucketAssignment& b0 = a.buckets(0);
  EXPECT_EQ(b0.owner_rank(), kEveryRank);
  EXPECT_EQ(b0.owner_worker_id(), "");
  ASSERT_EQ(b0.ranges_size(), 2);
  // 266 elements: 17 units of 16, 8 to rank 0 (128 elements), 9 to rank 1
  // (the last one short).
  EXPECT_EQ(b0.ranges(0).owner_worker_id(), "w-7");
  EXPECT_EQ(b0.ranges(0).begin_element(), 0);
  EXPECT_EQ(b0.ranges(0).end_element(), 128);
  EXPECT_EQ(b0.ranges(0).bytes(), 128 * 4);
  EXPECT_THAT(b0.ranges(0).parameter_names(), ElementsAre("bias", "w"));
  EXPECT_EQ(b0.ranges(1).owner_rank(), 1);
  EXPECT_EQ(b0.ranges(1).begin_element(), 128);
  EXPECT_EQ(b0.ranges(1).end_element(), 266);
  EXPECT_THAT(b0.ranges(1).parameter_names(), ElementsAre("w"));
  ASSERT_EQ(a.ranks_size(), 2);
  EXPECT_EQ(a.ranks(0).owned_elements() + a.ranks(1).owned_elements(), 299);
  EXPECT_EQ(a.ranks(0).owned_bytes() + a.ranks(1).owned_bytes(),
            a.total_bytes());
  EXPECT_EQ(a.ranks(0).num_buckets(), 2);
  EXPECT_EQ(a.ranks(1).num_buckets(), 2);
  // Rank 0: 128 + 16 elements, rank 1: 138 + 17 (in buckets this small the
  // 16-element alignment decides the balance).
  EXPECT_EQ(a.ranks(1).owned_elements(), 155);
  EXPECT_DOUBLE_EQ(a.imbalance(), 155.0 / 149.5);

  // A rank reads every bucket as kEveryRank from the owners view.
  const v1::ShardAssignment owners = OwnersView(a);
  EXPECT_EQ(owners.buckets(0).ranges_size(), 0);
  ASSERT_OK_AND_ASSIGN(std::vector<int> decoded, DecodeOwners(owners, 2, 2));
  EXPECT_THAT(decoded, ElementsAre(kEveryRank, kEveryRank));
}

TEST(LayoutTest, DecodeOwnersRefusesMixedShardedOwners) {
  v1::ShardAssignment a;
  a.set_policy(v1::JobSpec::SHARDED);
  a.add_buckets()->set_owner_rank(kEveryRank);
  v1::BucketAssignment* b = a.add_buckets();
  b->set_index(1);
  b->set_owner_rank(0);
  EXPECT_THAT(DecodeOwners(a, 2, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("under SHARDED")));
  // And kEveryRank is no owner under another policy.
  a.set_policy(v1::JobSpec::BALANCED);
  b->set_owner_rank(1);
  EXPECT_THAT(DecodeOwners(a, 2, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("to rank -1")));
}

}  // namespace
}  // namespace shard
}  // namespace pshard
