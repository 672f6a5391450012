#include "coordinator/layout_barrier.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shard/layout_fingerprint.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

EncodedLayout Layout(std::vector<int64_t> sizes) {
  EncodedLayout::Buckets buckets;
  for (size_t i = 0; i < sizes.size(); ++i) {
    v1::BucketLayout* b = buckets.Add();
    b->set_index(static_cast<int>(i));
    v1::BucketParameter* p = b->add_parameters();
    p->set_name(absl::StrCat("t", i));
    p->set_num_elements(sizes[i]);
    p->set_dtype("F32");
  }
  return EncodedLayout::FromBuckets(buckets);
}

TEST(LayoutBarrierTest, FirstValidReportBecomesTheReferenceAndAllCompleteIt) {
  LayoutBarrier barrier;
  barrier.Reset(2);
  const EncodedLayout layout = Layout({4, 8});
  EXPECT_FALSE(barrier.MatchesReference(layout, "", false));
  ASSERT_OK_AND_ASSIGN(bool became_reference,
                       barrier.Accept(layout, 0, "rank 0", {}));
  EXPECT_TRUE(became_reference);
  ASSERT_TRUE(barrier.has_reference());
  EXPECT_EQ(barrier.reference().size(), 2);
  EXPECT_EQ(barrier.reference_fingerprint(), layout.Fingerprint());
  EXPECT_EQ(barrier.reference_fingerprint().size(),
            shard::kLayoutFingerprintBytes);
  barrier.MarkReported(0);
  barrier.MarkReported(0);  // counted once
  EXPECT_EQ(barrier.reported(), 1);
  EXPECT_FALSE(barrier.complete());
  // The same bytes, or the same fingerprint, match without decoding.
  EXPECT_TRUE(barrier.MatchesReference(layout, "", false));
  EXPECT_TRUE(barrier.MatchesReference(EncodedLayout(), layout.Fingerprint(),
                                       true));
  EXPECT_FALSE(barrier.MatchesReference(EncodedLayout(), "other", true));
  barrier.MarkReported(1);
  EXPECT_TRUE(barrier.complete());
}

TEST(LayoutBarrierTest, ADifferentLayoutIsAMismatchNamingRankAndBucket) {
  LayoutBarrier barrier;
  barrier.Reset(2);
  ASSERT_OK(barrier.Accept(Layout({4, 8}), 0, "rank 0 (worker w-1)", {}));
  EXPECT_THAT(barrier.Accept(Layout({4, 9}), 1, "rank 1 (worker w-2)", {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("bucket layout mismatch: rank 1 (worker w-2) "
                                 "differs from rank 0 at bucket 1")));
  // Equal fields in another encoding are no mismatch.
  ASSERT_OK_AND_ASSIGN(bool became_reference,
                       barrier.Accept(Layout({4, 8}), 1, "rank 1", {}));
  EXPECT_FALSE(became_reference);
}

TEST(LayoutBarrierTest, InvalidOrUnparsableReportsAreRefusedAndSetNothing) {
  LayoutBarrier barrier;
  barrier.Reset(1);
  EXPECT_THAT(barrier.Accept(EncodedLayout::FromEncoded("\x2a\x05zz"), 0,
                             "rank 0", {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 0 sent a bucket layout that does not "
                                 "parse")));
  EXPECT_THAT(barrier.Accept(Layout({-1}), 0, "rank 0", {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 0 reported an invalid bucket layout")));
  EXPECT_FALSE(barrier.has_reference());
}

TEST(LayoutBarrierTest, ParkedFingerprintReportsAreSettledByTheReference) {
  LayoutBarrier barrier;
  barrier.Reset(3);
  barrier.AddWaiter(5);
  barrier.AddWaiter(6);
  const EncodedLayout layout = Layout({4});
  ASSERT_OK(barrier.Accept(layout, 0, "rank 0", {}));
  EXPECT_THAT(barrier.TakeWaiters(), ElementsAre(5, 6));
  EXPECT_THAT(barrier.TakeWaiters(), IsEmpty());
  EXPECT_TRUE(barrier.AcceptFingerprint(1, layout.Fingerprint()));
  EXPECT_FALSE(barrier.AcceptFingerprint(2, std::string(32, 'x')));
  EXPECT_EQ(barrier.reported(), 1);
}

TEST(LayoutBarrierTest, ResetStartsAnEpochAndDropReferenceKeepsTheCount) {
  LayoutBarrier barrier;
  barrier.Reset(2);
  ASSERT_OK(barrier.Accept(Layout({4}), 0, "rank 0", {}));
  barrier.MarkReported(0);
  barrier.DropReference();
  EXPECT_FALSE(barrier.has_reference());
  EXPECT_EQ(barrier.reported(), 1);
  barrier.Reset(2, /*all_reported=*/true);
  EXPECT_TRUE(barrier.complete());
  EXPECT_FALSE(barrier.has_reference());
  barrier.Reset(3);
  EXPECT_EQ(barrier.reported(), 0);
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
