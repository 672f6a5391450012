#include "worker/workload/accumulating_workload.h"

#include <cmath>
#include <memory>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/workload/recording_sink.h"

namespace pshard::worker {
namespace {

v1::JobSpec MlpSpec(int accumulation) {
  v1::JobSpec spec;
  spec.set_seed(3);
  spec.mutable_mlp()->set_input_dim(4);
  spec.mutable_mlp()->add_hidden_dims(8);
  spec.mutable_mlp()->set_output_dim(2);
  spec.mutable_mlp()->set_batch_size(16);
  spec.set_gradient_accumulation_steps(accumulation);
  return spec;
}

// Optimizer step s of N micro-batches is the mean of the plain workload's
// steps (s-1)N+1 .. sN; each gradient reaches the sink once, on the last
// micro-batch, already final; losses are averaged, samples counted.
TEST(AccumulatingWorkloadTest, StepIsTheMeanOfItsMicroBatches) {
  constexpr int kN = 4;
  ASSERT_OK_AND_ASSIGN(auto plain, CreateWorkload(MlpSpec(1), 1, 2));
  ASSERT_OK_AND_ASSIGN(auto accumulated, CreateWorkload(MlpSpec(kN), 1, 2));
  EXPECT_EQ(accumulated->samples_per_step(), kN * plain->samples_per_step());
  Buffers ref(*plain), got(*accumulated);
  ASSERT_OK(plain->InitializeParameters(ref.param_ptrs));
  ASSERT_OK(accumulated->InitializeParameters(got.param_ptrs));
  ASSERT_EQ(ref.params, got.params);
  for (int64_t step = 1; step <= 2; ++step) {
    std::vector<std::vector<float>> sum(ref.grads.size());
    double loss_sum = 0;
    RecordingSink ignored;
    for (int m = 1; m <= kN; ++m) {
      ASSERT_OK_AND_ASSIGN(double loss,
                           plain->ComputeGradients((step - 1) * kN + m,
                                                   ref.const_param_ptrs,
                                                   ref.grad_ptrs, ignored));
      loss_sum += loss;
      for (size_t i = 0; i < sum.size(); ++i) {
        if (m == 1) sum[i] = ref.grads[i];
        else for (size_t k = 0; k < sum[i].size(); ++k) sum[i][k] += ref.grads[i][k];
      }
    }
    RecordingSink sink(got.grad_ptrs, got.numels);
    ASSERT_OK_AND_ASSIGN(double loss,
                         accumulated->ComputeGradients(step, got.const_param_ptrs,
                                                       got.grad_ptrs, sink));
    EXPECT_DOUBLE_EQ(loss, loss_sum / kN);
    ASSERT_EQ(sink.order.size(), sum.size());  // once each, backward order
    EXPECT_EQ(sink.order, (std::vector<int>{3, 2, 1, 0}));
    for (size_t j = 0; j < sink.order.size(); ++j) {
      const int i = sink.order[j];
      for (float& g : sum[i]) g /= kN;
      // Final when announced, and the same in the buffer afterwards.
      EXPECT_EQ(sink.snapshots[j], sum[i]) << "parameter " << i;
      EXPECT_EQ(got.grads[i], sum[i]) << "parameter " << i;
    }
  }
}

// Every micro-batch's forward asks for the parameters it reads (the mlp:
// layer l's weight 2l and bias 2l+1), the first one before any gradient:
// with overlap_param_broadcast that is where the last step's updates are
// waited for. A failed wait fails the step.
TEST(AccumulatingWorkloadTest, ForwardWaitsReachTheSink) {
  constexpr int kN = 3;
  ASSERT_OK_AND_ASSIGN(auto accumulated, CreateWorkload(MlpSpec(kN), 1, 2));
  Buffers got(*accumulated);
  ASSERT_OK(accumulated->InitializeParameters(got.param_ptrs));
  RecordingSink sink(got.grad_ptrs, got.numels);
  ASSERT_OK(accumulated->ComputeGradients(1, got.const_param_ptrs,
                                          got.grad_ptrs, sink)
                .status());
  std::vector<int> one_forward = {0, 1, 2, 3};
  std::vector<int> every_forward;
  for (int m = 0; m < kN; ++m) {
    every_forward.insert(every_forward.end(), one_forward.begin(),
                         one_forward.end());
  }
  EXPECT_EQ(sink.waited, every_forward);

  RecordingSink failing(got.grad_ptrs, got.numels);
  failing.wait_status = absl::AbortedError("broadcast failed");
  EXPECT_THAT(accumulated->ComputeGradients(2, got.const_param_ptrs,
                                            got.grad_ptrs, failing),
              StatusIs(absl::StatusCode::kAborted, "broadcast failed"));
  EXPECT_TRUE(failing.order.empty());
}

TEST(AccumulatingWorkloadTest, RefusesBadArguments) {
  EXPECT_THAT(AccumulatingWorkload::Create(nullptr, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("no workload")));
  ASSERT_OK_AND_ASSIGN(auto plain, CreateWorkload(MlpSpec(1), 0, 1));
  EXPECT_THAT(AccumulatingWorkload::Create(std::move(plain), 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("gradient_accumulation_steps")));
}

}  // namespace
}  // namespace pshard::worker
