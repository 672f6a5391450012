#include "worker/workload/synthetic_workload.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/workload/recording_sink.h"

namespace pshard::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::SyntheticWorkload Spec(int64_t total, int64_t per_tensor) {
  v1::SyntheticWorkload spec;
  spec.set_num_parameters(total);
  spec.set_tensor_numel(per_tensor);
  return spec;
}

TEST(SyntheticWorkloadTest, TensorsAreNamedAndTheLastIsShorter) {
  ASSERT_OK_AND_ASSIGN(auto w, SyntheticWorkload::Create(Spec(25, 10), 1, 0));
  const auto& p = w->parameters();
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].name, "t0");
  EXPECT_THAT(p[0].shape, ElementsAre(10));
  EXPECT_EQ(p[2].name, "t2");
  EXPECT_EQ(p[2].numel, 5);
  EXPECT_THAT(p[2].shape, ElementsAre(5));
  EXPECT_EQ(w->samples_per_step(), 0);

  ASSERT_OK_AND_ASSIGN(auto exact, SyntheticWorkload::Create(Spec(20, 10), 1, 0));
  EXPECT_EQ(exact->parameters().size(), 2u);
  ASSERT_OK_AND_ASSIGN(auto dflt, SyntheticWorkload::Create(Spec(3 << 20, 0), 1, 0));
  ASSERT_EQ(dflt->parameters().size(), 3u);
  EXPECT_EQ(dflt->parameters()[0].numel, 1 << 20);
}

TEST(SyntheticWorkloadTest, DeterministicPerSeedRankAndStep) {
  ASSERT_OK_AND_ASSIGN(auto r0, SyntheticWorkload::Create(Spec(1000, 300), 5, 0));
  ASSERT_OK_AND_ASSIGN(auto r0b, SyntheticWorkload::Create(Spec(1000, 300), 5, 0));
  ASSERT_OK_AND_ASSIGN(auto r1, SyntheticWorkload::Create(Spec(1000, 300), 5, 1));
  Buffers a(*r0), b(*r0b), c(*r1);
  ASSERT_OK(r0->InitializeParameters(a.param_ptrs));
  ASSERT_OK(r0b->InitializeParameters(b.param_ptrs));
  ASSERT_OK(r1->InitializeParameters(c.param_ptrs));
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.params, c.params);  // init is the same on every rank
  EXPECT_NE(a.params[0], a.params[1]);

  RecordingSink sink(a.grad_ptrs, a.numels);
  ASSERT_OK_AND_ASSIGN(double loss,
                       r0->ComputeGradients(1, a.const_param_ptrs, a.grad_ptrs, sink));
  EXPECT_TRUE(std::isnan(loss));
  EXPECT_THAT(sink.order, ElementsAre(3, 2, 1, 0));
  for (size_t k = 0; k < sink.order.size(); ++k) {
    EXPECT_EQ(sink.snapshots[k], a.grads[sink.order[k]]);
  }
  RecordingSink quiet;
  ASSERT_OK(r0b->ComputeGradients(1, b.const_param_ptrs, b.grad_ptrs, quiet).status());
  EXPECT_EQ(a.grads, b.grads);
  ASSERT_OK(r1->ComputeGradients(1, c.const_param_ptrs, c.grad_ptrs, quiet).status());
  EXPECT_NE(a.grads, c.grads);  // rank matters
  ASSERT_OK(r0b->ComputeGradients(2, b.const_param_ptrs, b.grad_ptrs, quiet).status());
  EXPECT_NE(a.grads, b.grads);  // step matters
}

TEST(SyntheticWorkloadTest, GradientsAreUniformInMinusOneToOne) {
  ASSERT_OK_AND_ASSIGN(auto w, SyntheticWorkload::Create(Spec(200000, 100000), 9, 0));
  Buffers b(*w);
  RecordingSink sink;
  ASSERT_OK(w->ComputeGradients(1, b.const_param_ptrs, b.grad_ptrs, sink).status());
  double sum = 0, sum_sq = 0;
  float lo = 1, hi = -1;
  int64_t n = 0;
  for (const auto& g : b.grads) {
    for (float v : g) {
      sum += v;
      sum_sq += double{v} * v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      ++n;
    }
  }
  EXPECT_GE(lo, -1.0f);
  EXPECT_LT(hi, 1.0f);
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / n, 1.0 / 3.0, 0.01);  // variance of U(-1, 1)
}

TEST(SyntheticWorkloadTest, RejectsBadSpecsAndBuffers) {
  EXPECT_THAT(SyntheticWorkload::Create(Spec(0, 10), 1, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_parameters")));
  EXPECT_THAT(SyntheticWorkload::Create(Spec(10, -1), 1, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensor_numel")));
  EXPECT_THAT(SyntheticWorkload::Create(Spec(int64_t{1} << 34, 1), 1, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensors")));
  ASSERT_OK_AND_ASSIGN(auto w, SyntheticWorkload::Create(Spec(20, 10), 1, 0));
  std::vector<float> one(10);
  std::vector<float*> ptrs = {one.data()};
  EXPECT_THAT(w->InitializeParameters(ptrs),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected 2")));
}

}  // namespace
}  // namespace pshard::worker
