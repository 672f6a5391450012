#include "worker/workload/fixed_parameters_workload.h"

#include <limits>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

// The smallest workload built on the base: its calls only check buffers.
class TwoParameters final : public FixedParametersWorkload {
 public:
  TwoParameters()
      : FixedParametersWorkload("two", {{"a", {3}, 3}, {"b", {2, 2}, 4}}) {}

  absl::Status InitializeParameters(absl::Span<float* const> params) override {
    return CheckBuffers(params.size());
  }
  absl::StatusOr<double> ComputeGradients(
      int64_t, absl::Span<const float* const> params,
      absl::Span<float* const> grads, GradientSink&) override {
    RETURN_IF_ERROR(CheckBuffers(params.size(), grads.size()));
    return std::numeric_limits<double>::quiet_NaN();
  }
  int64_t samples_per_step() const override { return 0; }
};

class NoSink final : public GradientSink {
 public:
  void GradientReady(int) override {}
};

TEST(FixedParametersWorkloadTest, HoldsTheParameterList) {
  TwoParameters w;
  ASSERT_EQ(w.parameters().size(), 2u);
  EXPECT_EQ(w.parameters()[1].name, "b");
  EXPECT_EQ(w.parameters()[1].numel, 4);
}

TEST(FixedParametersWorkloadTest, WantsOneBufferPerParameter) {
  TwoParameters w;
  float x[4];
  float* two[] = {x, x};
  float* one[] = {x};
  const float* const_two[] = {x, x};
  const float* const_three[] = {x, x, x};
  NoSink sink;
  EXPECT_THAT(w.InitializeParameters(two), IsOk());
  EXPECT_THAT(w.InitializeParameters(one),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "two: expected 2 parameter buffers, got 1"));
  EXPECT_THAT(w.ComputeGradients(1, const_two, two, sink), IsOk());
  EXPECT_THAT(w.ComputeGradients(1, const_three, two, sink),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "two: expected 2 parameter and gradient buffers, got 3 "
                       "and 2"));
  EXPECT_THAT(w.ComputeGradients(1, const_two, one, sink),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "two: expected 2 parameter and gradient buffers, got 2 "
                       "and 1"));
}

}  // namespace
}  // namespace pshard::worker
