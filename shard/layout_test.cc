#include "shard/layout.h"

#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "pshard/v1/shard.pb.h"
#include "pshard/v1/worker_control.pb.h"

namespace pshard {
namespace shard {
namespace {

v1::ShardAssignment Owners(const std::vector<std::pair<int, int>>& buckets) {
  v1::ShardAssignment a;
  for (const auto& [index, owner] : buckets) {
    v1::BucketAssignment* b = a.add_buckets();
    b->set_index(index);
    b->set_owner_rank(owner);
  }
  return a;
}

TEST(DecodeOwnersTest, OwnersByBucketIndexInAnyOrder) {
  absl::StatusOr<std::vector<int>> owners =
      DecodeOwners(Owners({{2, 0}, {0, 1}, {1, 1}}), 3, 2);
  ASSERT_TRUE(owners.ok()) << owners.status();
  EXPECT_EQ(*owners, (std::vector<int>{1, 1, 0}));
}

TEST(DecodeOwnersTest, RejectsWhatNoCoordinatorSends) {
  EXPECT_THAT(DecodeOwners(Owners({{0, 0}, {0, 1}}), 2, 2).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "assignment names bucket 0 twice or out of range (2 "
                       "buckets)"));
  EXPECT_THAT(DecodeOwners(Owners({{0, 0}, {2, 1}}), 2, 2).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "assignment names bucket 2 twice or out of range (2 "
                       "buckets)"));
  EXPECT_THAT(DecodeOwners(Owners({{0, 0}}), 2, 2).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "assignment has no owner for bucket 1 (2 buckets)"));
  EXPECT_THAT(DecodeOwners(Owners({{0, 2}}), 1, 2).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "assignment gives bucket 0 to rank 2 of a 2-rank job"));
}

TEST(BucketBytesTest, CountsEachParameterByItsDtype) {
  Layout layout;
  v1::BucketLayout* b = layout.Add();
  for (const auto& [n, dtype] : std::vector<std::pair<int, const char*>>{
           {3, "F32"}, {5, "BF16"}, {7, "F16"}}) {
    v1::BucketParameter* p = b->add_parameters();
    p->set_num_elements(n);
    p->set_dtype(dtype);
  }
  EXPECT_EQ(BucketBytes(layout), (std::vector<int64_t>{3 * 4 + 5 * 2 + 7 * 2}));
}

TEST(ValidateLayoutTest, AParameterNameAppearsOnce) {
  Layout layout;
  for (const char* name : {"w", "b", "w"}) {
    v1::BucketLayout* bucket = layout.Add();
    bucket->set_index(layout.size() - 1);
    v1::BucketParameter* p = bucket->add_parameters();
    p->set_name(name);
    p->set_num_elements(4);
    p->set_dtype("F32");
  }
  EXPECT_THAT(ValidateLayout(layout, LayoutLimits()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "buckets[2].parameters[0].name: \"w\" is already "
                       "buckets[0].parameters[0]: parameter names must be "
                       "unique"));
  layout.Mutable(2)->mutable_parameters(0)->set_name("v");
  EXPECT_OK(ValidateLayout(layout, LayoutLimits()));
}

}  // namespace
}  // namespace shard
}  // namespace pshard
