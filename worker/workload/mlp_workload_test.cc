#include "worker/workload/mlp_workload.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/optim/shard_optimizer.h"
#include "worker/workload/blas_threads.h"
#include "worker/workload/recording_sink.h"

namespace pshard::worker {
namespace {

using ::testing::ElementsAre;

v1::MlpWorkload Shape(int in, std::vector<int> hidden, int out, int batch) {
  v1::MlpWorkload spec;
  spec.set_input_dim(in);
  for (int h : hidden) spec.add_hidden_dims(h);
  spec.set_output_dim(out);
  spec.set_batch_size(batch);
  return spec;
}

class MlpWorkloadTest : public ::testing::Test {
 protected:
  void SetUp() override { SetBlasNumThreads(1); }
};

TEST_F(MlpWorkloadTest, ParametersAreNamedAndShapedLikeNnSequential) {
  ASSERT_OK_AND_ASSIGN(auto w, MlpWorkload::Create(Shape(3, {5, 4}, 2, 7), 1, 0));
  const auto& p = w->parameters();
  ASSERT_EQ(p.size(), 6u);
  EXPECT_EQ(p[0].name, "layers.0.weight");
  EXPECT_THAT(p[0].shape, ElementsAre(5, 3));
  EXPECT_EQ(p[0].numel, 15);
  EXPECT_EQ(p[1].name, "layers.0.bias");
  EXPECT_THAT(p[1].shape, ElementsAre(5));
  EXPECT_EQ(p[2].name, "layers.2.weight");
  EXPECT_THAT(p[2].shape, ElementsAre(4, 5));
  EXPECT_EQ(p[4].name, "layers.4.weight");
  EXPECT_THAT(p[4].shape, ElementsAre(2, 4));
  EXPECT_EQ(p[5].name, "layers.4.bias");
  EXPECT_EQ(w->samples_per_step(), 7);
}

TEST_F(MlpWorkloadTest, InitIsTorchLikeAndSameOnEveryRank) {
  ASSERT_OK_AND_ASSIGN(auto r0, MlpWorkload::Create(Shape(16, {64}, 4, 8), 42, 0));
  ASSERT_OK_AND_ASSIGN(auto r1, MlpWorkload::Create(Shape(16, {64}, 4, 8), 42, 1));
  ASSERT_OK_AND_ASSIGN(auto other, MlpWorkload::Create(Shape(16, {64}, 4, 8), 43, 0));
  Buffers b0(*r0), b1(*r1), bo(*other);
  ASSERT_OK(r0->InitializeParameters(b0.param_ptrs));
  ASSERT_OK(r1->InitializeParameters(b1.param_ptrs));
  ASSERT_OK(other->InitializeParameters(bo.param_ptrs));
  EXPECT_EQ(b0.params, b1.params);
  EXPECT_NE(b0.params, bo.params);
  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)): fan_in 16 for layer 0, 64 for layer 2.
  for (int i = 0; i < 4; ++i) {
    const float bound = i < 2 ? 0.25f : 0.125f;
    float max_abs = 0;
    for (float v : b0.params[i]) max_abs = std::max(max_abs, std::abs(v));
    EXPECT_LE(max_abs, bound) << i;
    EXPECT_GT(max_abs, 0.5f * bound) << i;
  }
}

TEST_F(MlpWorkloadTest, GradientsReadyLastLayerFirstAndFinalWhenSignalled) {
  ASSERT_OK_AND_ASSIGN(auto w, MlpWorkload::Create(Shape(6, {8, 7}, 3, 5), 9, 0));
  Buffers b(*w);
  ASSERT_OK(w->InitializeParameters(b.param_ptrs));
  RecordingSink sink(b.grad_ptrs, b.numels);
  ASSERT_OK_AND_ASSIGN(double loss,
                       w->ComputeGradients(1, b.const_param_ptrs, b.grad_ptrs, sink));
  EXPECT_GT(loss, 0);
  EXPECT_THAT(sink.order, ElementsAre(5, 4, 3, 2, 1, 0));
  for (size_t k = 0; k < sink.order.size(); ++k) {
    EXPECT_EQ(sink.snapshots[k], b.grads[sink.order[k]]) << "param " << sink.order[k];
  }
}

// A sink that behaves like an eager hook: it "steps" (here: poisons) a
// parameter the moment its gradient is declared ready. The workload must not
// read a parameter after signalling it, so gradients are unchanged.
class PoisoningSink : public GradientSink {
 public:
  explicit PoisoningSink(Buffers& b) : b_(b) {}
  void GradientReady(int i) override {
    std::fill(b_.params[i].begin(), b_.params[i].end(), std::nanf(""));
  }

 private:
  Buffers& b_;
};

TEST_F(MlpWorkloadTest, NeverReadsAParameterAfterSignallingIt) {
  ASSERT_OK_AND_ASSIGN(auto w, MlpWorkload::Create(Shape(6, {8, 7}, 3, 5), 9, 0));
  Buffers calm(*w), eager(*w);
  ASSERT_OK(w->InitializeParameters(calm.param_ptrs));
  ASSERT_OK(w->InitializeParameters(eager.param_ptrs));
  RecordingSink sink;
  ASSERT_OK_AND_ASSIGN(double l1, w->ComputeGradients(2, calm.const_param_ptrs,
                                                      calm.grad_ptrs, sink));
  PoisoningSink poison(eager);
  ASSERT_OK_AND_ASSIGN(double l2, w->ComputeGradients(2, eager.const_param_ptrs,
                                                      eager.grad_ptrs, poison));
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(calm.grads, eager.grads);
}

TEST_F(MlpWorkloadTest, GradientsMatchFiniteDifferences) {
  ASSERT_OK_AND_ASSIGN(auto w, MlpWorkload::Create(Shape(3, {4}, 2, 5), 5, 0));
  Buffers b(*w);
  ASSERT_OK(w->InitializeParameters(b.param_ptrs));
  RecordingSink sink;
  ASSERT_OK(w->ComputeGradients(3, b.const_param_ptrs, b.grad_ptrs, sink).status());
  ASSERT_OK_AND_ASSIGN(const double base, w->Loss(3, b.const_param_ptrs));
  const float h = 2e-3f;
  int checked = 0, kinks = 0;
  for (size_t i = 0; i < b.params.size(); ++i) {
    for (size_t j = 0; j < b.params[i].size(); ++j) {
      const float saved = b.params[i][j];
      b.params[i][j] = saved + h;
      ASSERT_OK_AND_ASSIGN(double up, w->Loss(3, b.const_param_ptrs));
      b.params[i][j] = saved - h;
      ASSERT_OK_AND_ASSIGN(double down, w->Loss(3, b.const_param_ptrs));
      b.params[i][j] = saved;
      const double numeric = (up - down) / (2.0 * h);
      const double analytic = b.grads[i][j];
      const double tolerance = 2e-3 + 2e-2 * std::abs(numeric);
      // A ReLU switching inside [-h, h] makes the loss non-smooth there: the
      // one-sided slopes disagree. Such elements prove nothing; skip them.
      const double right = (up - base) / h, left = (base - down) / h;
      if (std::abs(right - left) > tolerance) {
        ++kinks;
        continue;
      }
      EXPECT_NEAR(analytic, numeric, tolerance)
          << w->parameters()[i].name << "[" << j << "]";
      ++checked;
    }
  }
  EXPECT_LE(kinks, 3);
  checked += kinks;
  EXPECT_EQ(checked, 12 + 4 + 8 + 2);
}

TEST_F(MlpWorkloadTest, RanksDrawDifferentData) {
  ASSERT_OK_AND_ASSIGN(auto r0, MlpWorkload::Create(Shape(4, {8}, 2, 4), 7, 0));
  ASSERT_OK_AND_ASSIGN(auto r1, MlpWorkload::Create(Shape(4, {8}, 2, 4), 7, 1));
  Buffers b0(*r0), b1(*r1);
  ASSERT_OK(r0->InitializeParameters(b0.param_ptrs));
  ASSERT_OK(r1->InitializeParameters(b1.param_ptrs));
  RecordingSink sink;
  ASSERT_OK_AND_ASSIGN(double l0, r0->ComputeGradients(1, b0.const_param_ptrs, b0.grad_ptrs, sink));
  ASSERT_OK_AND_ASSIGN(double l1, r1->ComputeGradients(1, b1.const_param_ptrs, b1.grad_ptrs, sink));
  EXPECT_NE(l0, l1);
  EXPECT_NE(b0.grads, b1.grads);
  // Same rank, same step: bit-identical (single-threaded BLAS).
  std::vector<std::vector<float>> first = b0.grads;
  ASSERT_OK_AND_ASSIGN(double again, r0->ComputeGradients(1, b0.const_param_ptrs, b0.grad_ptrs, sink));
  EXPECT_EQ(again, l0);
  EXPECT_EQ(b0.grads, first);
}

TEST_F(MlpWorkloadTest, RejectsWrongBufferCounts) {
  ASSERT_OK_AND_ASSIGN(auto w, MlpWorkload::Create(Shape(4, {}, 2, 4), 7, 0));
  Buffers b(*w);
  RecordingSink sink;
  EXPECT_THAT(w->ComputeGradients(1, absl::MakeConstSpan(b.const_param_ptrs).subspan(1),
                                  b.grad_ptrs, sink),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("expected 2")));
  EXPECT_TRUE(sink.order.empty());
  EXPECT_THAT(MlpWorkload::Create(Shape(0, {}, 2, 4), 7, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("width")));
}

// Plain SGD (through the ShardOptimizer, one bucket per parameter) on the
// workload's own gradients: the loss on a held-out batch must halve.
TEST_F(MlpWorkloadTest, SgdHalvesTheLossIn100Steps) {
  ASSERT_OK_AND_ASSIGN(auto w, MlpWorkload::Create(Shape(32, {64, 64}, 8, 32), 2026, 0));
  Buffers b(*w);
  ASSERT_OK(w->InitializeParameters(b.param_ptrs));
  v1::OptimizerSpec spec;
  spec.set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_hyper_parameters()->set_lr(0.2);
  ASSERT_OK_AND_ASSIGN(auto opt, ShardOptimizer::Create(spec));
  for (size_t i = 0; i < b.params.size(); ++i) {
    ASSERT_OK(opt->AddBucket(i, {{w->parameters()[i].name, 0, b.numels[i]}}));
  }
  constexpr int64_t kHeldOut = 1000000;
  ASSERT_OK_AND_ASSIGN(const double initial, w->Loss(kHeldOut, b.const_param_ptrs));
  RecordingSink sink;
  for (int64_t step = 1; step <= 100; ++step) {
    ASSERT_OK(w->ComputeGradients(step, b.const_param_ptrs, b.grad_ptrs, sink).status());
    for (size_t i = 0; i < b.params.size(); ++i) {
      ASSERT_OK(opt->Step(i, b.params[i].data(), b.grads[i].data()));
    }
  }
  ASSERT_OK_AND_ASSIGN(const double final_loss, w->Loss(kHeldOut, b.const_param_ptrs));
  EXPECT_LT(final_loss, 0.5 * initial) << "initial " << initial;
  RecordProperty("initial_loss", std::to_string(initial));
  RecordProperty("final_loss", std::to_string(final_loss));
  std::cout << "held-out loss " << initial << " -> " << final_loss << "\n";
}

}  // namespace
}  // namespace pshard::worker
