#include "worker/bucket/bucket_layout.h"

#include <cstdint>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

std::vector<ParameterInfo> Params(std::vector<int64_t> numels) {
  std::vector<ParameterInfo> params;
  for (size_t i = 0; i < numels.size(); ++i) {
    params.push_back({"p" + std::to_string(i), {numels[i]}, numels[i]});
  }
  return params;
}

TEST(BucketLayoutTest, FirstBucketHoldsLastParameters) {
  // Cap 100 bytes = 25 floats.
  auto params = Params({10, 10, 10, 10});
  ASSERT_OK_AND_ASSIGN(
      BucketLayout layout,
      BucketLayout::Build(params, BucketLayout::DefaultReadyOrder(4), 100));
  ASSERT_EQ(layout.num_buckets(), 2);
  EXPECT_EQ(layout.bucket_of(3), 0);
  EXPECT_EQ(layout.bucket_of(2), 0);
  EXPECT_EQ(layout.bucket_of(1), 1);
  EXPECT_EQ(layout.bucket_of(0), 1);
  EXPECT_EQ(layout.offset_of(3), 0);
  EXPECT_EQ(layout.offset_of(2), 10);
  EXPECT_EQ(layout.BucketBytes(), (std::vector<int64_t>{80, 80}));
  auto proto = layout.ToProto();
  ASSERT_EQ(proto.size(), 2u);
  EXPECT_EQ(proto[0].index(), 0);
  EXPECT_EQ(proto[0].parameters(0).name(), "p3");
  EXPECT_EQ(proto[0].parameters(1).name(), "p2");
  EXPECT_EQ(proto[0].parameters(0).dtype(), "F32");
  EXPECT_EQ(proto[1].parameters(1).num_elements(), 10);
}

TEST(BucketLayoutTest, OversizedParameterGetsItsOwnBucket) {
  auto params = Params({5, 100, 5, 5});
  ASSERT_OK_AND_ASSIGN(
      BucketLayout layout,
      BucketLayout::Build(params, BucketLayout::DefaultReadyOrder(4), 40));
  // Ready order 3,2,1,0; cap 10 floats: {3,2} {1} {0}.
  ASSERT_EQ(layout.num_buckets(), 3);
  EXPECT_EQ(layout.buckets()[0].numel, 10);
  EXPECT_EQ(layout.buckets()[1].numel, 100);
  EXPECT_EQ(layout.buckets()[1].entries.size(), 1u);
  EXPECT_EQ(layout.buckets()[2].numel, 5);
}

TEST(BucketLayoutTest, FollowsObservedOrder) {
  auto params = Params({3, 3, 3});
  std::vector<int> order = {1, 0, 2};
  ASSERT_OK_AND_ASSIGN(BucketLayout layout,
                       BucketLayout::Build(params, order, 1 << 20));
  ASSERT_EQ(layout.num_buckets(), 1);
  EXPECT_EQ(layout.offset_of(1), 0);
  EXPECT_EQ(layout.offset_of(0), 3);
  EXPECT_EQ(layout.offset_of(2), 6);
  auto spans = layout.Spans(0);
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[1].name, "p0");
  EXPECT_EQ(spans[1].offset, 3);
}

TEST(BucketLayoutTest, RejectsBadOrder) {
  auto params = Params({3, 3});
  std::vector<int> dup = {1, 1};
  EXPECT_THAT(BucketLayout::Build(params, dup, 100).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("permutation")));
  std::vector<int> short_order = {1};
  EXPECT_THAT(BucketLayout::Build(params, short_order, 100).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(BucketLayout::Build(params, {0, 1}, 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST(BucketStorageTest, ViewsAreZeroCopyIntoBuckets) {
  auto params = Params({4, 4, 4});
  ASSERT_OK_AND_ASSIGN(
      BucketLayout layout,
      BucketLayout::Build(params, BucketLayout::DefaultReadyOrder(3), 32));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<BucketStorage> owned,
                       BucketStorage::Create(layout));
  BucketStorage& storage = *owned;
  ASSERT_EQ(layout.num_buckets(), 2);
  auto floats = [](void* p) { return static_cast<float*>(p); };
  EXPECT_EQ(storage.param(2), storage.bucket_params(0));
  EXPECT_EQ(floats(storage.param(1)), floats(storage.bucket_params(0)) + 4);
  EXPECT_EQ(storage.grad(0), storage.bucket_grads(1));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(storage.bucket_params(1)) % 64, 0u);
  floats(storage.param(1))[2] = 7;
  EXPECT_EQ(floats(storage.bucket_params(0))[6], 7);
}

// bf16 parameters with fp32 gradients: each view at its element offset in
// its own dtype; the cap counts bytes of the parameters' dtype.
TEST(BucketStorageTest, MixedDtypesOffsetByTheirOwnSize) {
  auto params = Params({4, 4, 4});
  ASSERT_OK_AND_ASSIGN(
      BucketLayout layout,
      BucketLayout::Build(params, BucketLayout::DefaultReadyOrder(3), 16,
                          DataType::kBFloat16));
  ASSERT_EQ(layout.num_buckets(), 2);  // 8 bf16 elements fit in 16 bytes
  EXPECT_STREQ(layout.dtype_name(), "BF16");
  EXPECT_EQ(layout.BucketBytes(), (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(layout.ToProto()[0].parameters(0).dtype(), "BF16");
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<BucketStorage> storage,
      BucketStorage::Create(layout, DataType::kBFloat16, DataType::kFloat32));
  EXPECT_EQ(static_cast<char*>(storage->param(1)),
            static_cast<char*>(storage->bucket_params(0)) + 4 * 2);
  EXPECT_EQ(static_cast<char*>(storage->grad(1)),
            static_cast<char*>(storage->bucket_grads(0)) + 4 * 4);
}

// A bucket larger than any address space: ResourceExhausted naming the
// sizes, not std::bad_alloc.
TEST(BucketStorageTest, UnallocatableBucketIsResourceExhausted) {
  auto params = Params({int64_t{1} << 58});
  ASSERT_OK_AND_ASSIGN(BucketLayout layout,
                       BucketLayout::Build(params, {0}, int64_t{1} << 62));
  EXPECT_THAT(BucketStorage::Create(layout).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::HasSubstr(
                           "cannot allocate the buckets: 1 bucket(s) of "
                           "288230376151711744 parameters")));
}

// The first step's re-pack, in place: every parameter keeps its values and
// gradient at its new place, the buckets stay 64-byte aligned, and every
// view handed out before still points into the same (allocated) arena.
TEST(BucketStorageTest, RearrangeMovesValuesInPlace) {
  // bf16 parameters, fp32 gradients; 2 buckets (8 elements each), then one
  // in another order.
  auto params = Params({5, 3, 7, 1});
  ASSERT_OK_AND_ASSIGN(
      BucketLayout first,
      BucketLayout::Build(params, BucketLayout::DefaultReadyOrder(4), 16,
                          DataType::kBFloat16));
  ASSERT_OK_AND_ASSIGN(
      BucketLayout second,
      BucketLayout::Build(params, {2, 0, 3, 1}, 32, DataType::kBFloat16));
  ASSERT_NE(first.num_buckets(), second.num_buckets());
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<BucketStorage> storage,
      BucketStorage::Create(first, DataType::kBFloat16, DataType::kFloat32));
  auto* param_arena = static_cast<char*>(storage->bucket_params(0));
  auto* grad_arena = static_cast<char*>(storage->bucket_grads(0));
  const std::vector<void*> before = storage->param_views();
  for (int i = 0; i < 4; ++i) {
    for (int64_t k = 0; k < params[i].numel; ++k) {
      static_cast<uint16_t*>(storage->param(i))[k] = 100 * i + k;
      static_cast<float*>(storage->grad(i))[k] = -(100.0f * i + k);
    }
  }
  ASSERT_OK(storage->Rearrange(second));
  EXPECT_NE(storage->param_views(), before);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(static_cast<char*>(storage->param(i)),
              static_cast<char*>(storage->bucket_params(second.bucket_of(i))) +
                  second.offset_of(i) * 2);
    for (int64_t k = 0; k < params[i].numel; ++k) {
      EXPECT_EQ(static_cast<uint16_t*>(storage->param(i))[k], 100 * i + k);
      EXPECT_EQ(static_cast<float*>(storage->grad(i))[k], -(100.0f * i + k));
    }
  }
  for (int b = 0; b < second.num_buckets(); ++b) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(storage->bucket_params(b)) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(storage->bucket_grads(b)) % 64, 0u);
  }
  EXPECT_EQ(storage->bucket_params(0), param_arena);
  EXPECT_EQ(storage->bucket_grads(0), grad_arena);
  // The old views: inside the arena (16 bf16 elements and a bucket's
  // alignment for each of 4 parameters and one more), which is still there.
  for (void* view : before) {
    EXPECT_GE(static_cast<char*>(view), param_arena);
    EXPECT_LT(static_cast<char*>(view), param_arena + 16 * 2 + 5 * 64);
  }
  // A layout of other parameters is refused, nothing moved.
  ASSERT_OK_AND_ASSIGN(BucketLayout other,
                       BucketLayout::Build(Params({5, 3, 7, 2}),
                                           {0, 1, 2, 3}, 64));
  EXPECT_THAT(storage->Rearrange(other),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("the same parameters")));
  EXPECT_EQ(static_cast<uint16_t*>(storage->param(3))[0], 300);
}

}  // namespace
}  // namespace pshard::worker
