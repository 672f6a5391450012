// Tests of the host-side optimizer plan. The GPU kernel's per-chunk work is
// emulated on the CPU with the CPU reference kernels, so the chunking, group
// tables and state offsets are checked against the CPU ShardOptimizer on every
// machine, GPU or not.
#include "worker/gpu/optimizer_plan.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/gpu/kernel_params.h"
#include "worker/gpu/optimizer_test_specs.h"
#include "worker/gpu/synthetic.h"
#include "worker/optim/cpu_kernels.h"
#include "worker/optim/shard_optimizer.h"
#include "worker/workload/random.h"
#include "worker/workload/synthetic_workload.h"

namespace pshard::worker::gpu {
namespace {

using ::testing::HasSubstr;

using testing::kAdagradJson;
using testing::kAdamAmsgradJson;
using testing::kAdamJson;
using testing::kAdamScheduleJson;
using testing::kLionJson;
using testing::kRmspropJson;
using testing::kSgdScheduleJson;
using testing::kAdamWJson;
using testing::kSgdJson;
using testing::Spec;

// A bucket with a large tensor, small odd-sized ones, and a 3-element gap.
std::vector<ParamSpan> MixedSpans() {
  return {{"w0", 0, 40000},
          {"w0.bias", 40000, 10},
          {"w1", 40013, 5},
          {"w1.bias", 40018, 7}};
}

TEST(PlanBucketTest, ChunksCoverEverySpanOnceAligned) {
  ASSERT_OK_AND_ASSIGN(BucketPlan plan,
                       PlanBucket(Spec(kAdamJson), 7, MixedSpans()));
  EXPECT_EQ(plan.kind, kKernelAdam);
  EXPECT_FALSE(plan.decoupled);
  EXPECT_EQ(plan.extent, 40025);
  EXPECT_EQ(plan.num_state_arrays, 2);
  EXPECT_EQ(plan.state_numel, 40022);  // the gap has no state
  ASSERT_EQ(plan.groups.size(), 2u);   // default, *.bias
  ASSERT_EQ(plan.launches.size(), 1u);
  std::vector<int> covered(plan.extent, 0);
  for (const ChunkDescriptor& c : plan.chunks) {
    EXPECT_GT(c.numel, 0);
    EXPECT_LE(c.numel, kOptimizerChunkElements);
    // Chunks start at a multiple of 4 unless they end at one (alignment head).
    if (c.offset % 4 != 0) {
      EXPECT_EQ((c.offset + c.numel) % 4, 0) << c.offset;
    }
    for (int64_t i = c.offset; i < c.offset + c.numel; ++i) ++covered[i];
  }
  for (int64_t i = 0; i < plan.extent; ++i) {
    EXPECT_EQ(covered[i], (i >= 40010 && i < 40013) ? 0 : 1) << i;
  }
  // 40000 = 4 * 8192 + 7232; then w0.bias (group 1) merges with nothing.
  static_assert(kOptimizerChunkElements == 8192, "update the numbers below");
  EXPECT_EQ(plan.chunks[0].offset, 0);
  EXPECT_EQ(plan.chunks[0].numel, 8192);
  EXPECT_EQ(plan.chunks[4].numel, 40000 - 4 * 8192);
  EXPECT_EQ(plan.chunks[5].offset, 40000);
  EXPECT_EQ(plan.chunks[5].group, 1);
  EXPECT_EQ(plan.chunks[5].state_offset, 40000);
  EXPECT_EQ(plan.state_bytes(), 2 * 40022 * 4);
}

TEST(PlanBucketTest, SgdStateOnlyWhereMomentum) {
  ASSERT_OK_AND_ASSIGN(BucketPlan plan,
                       PlanBucket(Spec(kSgdJson), 0, MixedSpans()));
  EXPECT_EQ(plan.kind, kKernelSgd);
  EXPECT_EQ(plan.num_state_arrays, 1);
  EXPECT_EQ(plan.state_numel, 40005);  // w0 and w1; biases have momentum 0
  for (const ChunkDescriptor& c : plan.chunks) {
    const bool bias =
        (c.offset >= 40000 && c.offset < 40010) || c.offset >= 40018;
    EXPECT_EQ(c.state_offset < 0, bias) << c.offset;
  }
}

TEST(PlanBucketTest, SgdWithoutMomentumHasNoState) {
  ASSERT_OK_AND_ASSIGN(
      BucketPlan plan,
      PlanBucket(Spec(R"({"kind": "SGD", "hyperParameters": {"lr": 0.1}})"), 0,
                 MixedSpans()));
  EXPECT_EQ(plan.num_state_arrays, 0);
  EXPECT_EQ(plan.state_numel, 0);
  EXPECT_EQ(plan.state_bytes(), 0);
}

TEST(PlanBucketTest, ManyGroupsSplitIntoLaunches) {
  std::string json = R"({"kind": "ADAM", "paramGroups": [)";
  std::vector<ParamSpan> spans;
  for (int i = 0; i < 20; ++i) {
    if (i > 0) json += ",";
    json += R"({"params": ["p)" + std::to_string(i) +
            R"("], "hyperParameters": {"lr": )" +
            std::to_string(0.001 * (i + 1)) + "}}";
    spans.push_back({"p" + std::to_string(i), i * 100, 100});
  }
  json += "]}";
  ASSERT_OK_AND_ASSIGN(BucketPlan plan, PlanBucket(Spec(json), 0, spans));
  ASSERT_EQ(plan.groups.size(), 20u);
  ASSERT_EQ(plan.launches.size(), 2u);
  EXPECT_EQ(plan.launches[0].num_groups, kOptimizerMaxGroupsPerLaunch);
  EXPECT_EQ(plan.launches[1].first_group, kOptimizerMaxGroupsPerLaunch);
  EXPECT_EQ(plan.launches[1].num_groups, 20 - kOptimizerMaxGroupsPerLaunch);
  for (const BucketPlan::Launch& launch : plan.launches) {
    for (int i = launch.first_chunk; i < launch.first_chunk + launch.num_chunks;
         ++i) {
      EXPECT_GE(plan.chunks[i].group, 0);
      EXPECT_LT(plan.chunks[i].group, launch.num_groups);
    }
  }
  const OptimizerLaunchParams params =
      MakeLaunchParams(plan, 1, plan.chunks.data(), /*step=*/1);
  EXPECT_EQ(params.num_chunks, plan.launches[1].num_chunks);
  EXPECT_EQ(params.chunks, plan.chunks.data() + plan.launches[1].first_chunk);
  // Group 16 of the bucket is local group 0 of launch 1 (lr 0.017).
  EXPECT_DOUBLE_EQ(plan.groups[16].lr, 0.017);
  const cpu::AdamScalars expected =
      cpu::MakeAdamScalars(plan.groups[16].lr, 0.9, 0.999, 1e-8, 0, false, 1);
  EXPECT_EQ(params.groups[0].neg_step_size, expected.neg_step_size);
}

TEST(PlanBucketTest, RejectsBadSpans) {
  const v1::OptimizerSpec spec = Spec(kAdamJson);
  EXPECT_THAT(PlanBucket(spec, 0, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no parameter spans")));
  EXPECT_THAT(
      PlanBucket(spec, -1, MixedSpans()),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bucket index")));
  EXPECT_THAT(
      PlanBucket(spec, 0, {{"a", 0, 10}, {"b", 5, 10}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overlap")));
  EXPECT_THAT(
      PlanBucket(spec, 0, {{"a", 0, 10}, {"a", 10, 10}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("appears twice")));
  EXPECT_THAT(
      PlanBucket(spec, 0, {{"a", -1, 10}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid span")));
  EXPECT_THAT(
      PlanBucket(Spec(R"({"kind": "SGD"})"), 0, {{"a", 0, 10}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("learning rate")));
  EXPECT_THAT(
      PlanBucket(v1::OptimizerSpec(), 0, {{"a", 0, 10}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not supported")));
}

TEST(MakeGroupScalarsTest, SameBitsAsTheCpuKernels) {
  ASSERT_OK_AND_ASSIGN(BucketPlan adamw,
                       PlanBucket(Spec(kAdamWJson), 0, {{"w", 0, 8}}));
  HyperParameters hp = adamw.groups[0];
  for (int64_t step : {1, 2, 10, 1000}) {
    const GroupScalars g = MakeGroupScalars(adamw, hp, step);
    const cpu::AdamScalars s = cpu::MakeAdamScalars(
        hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, true, step);
    EXPECT_EQ(g.neg_step_size, s.neg_step_size);
    EXPECT_EQ(g.bias_correction2_sqrt, s.bias_correction2_sqrt);
    EXPECT_EQ(g.decay, s.decay);
    EXPECT_EQ(g.decoupled, 1);
    EXPECT_EQ(g.adam_weight_decay, 0.0f);
    EXPECT_EQ(g.eps, s.eps);
  }
  ASSERT_OK_AND_ASSIGN(BucketPlan sgd,
                       PlanBucket(Spec(kSgdJson), 0, {{"w", 0, 8}}));
  const GroupScalars first = MakeGroupScalars(sgd, sgd.groups[0], 1);
  const GroupScalars later = MakeGroupScalars(sgd, sgd.groups[0], 2);
  EXPECT_EQ(first.first_step, 1);
  EXPECT_EQ(later.first_step, 0);
  EXPECT_EQ(first.neg_lr, -0.1f);
  EXPECT_EQ(first.nesterov, 1);
  EXPECT_EQ(first.momentum, 0.9f);
}

// The program's changes (HyperParameterOverrides) reach the kernel's
// scalars as the CPU optimizer's: their own group's only.
TEST(MakeGroupScalarsTest, TheProgramsChangesApplyToTheirGroup) {
  const v1::OptimizerSpec spec = Spec(kAdamWJson);
  ASSERT_OK_AND_ASSIGN(BucketPlan adamw, PlanBucket(spec, 0, {{"w", 0, 8}}));
  const HyperParameters& hp = adamw.groups[0];
  v1::OptimizerHyperParameters changes;
  changes.set_lr(0.5);
  changes.add_betas(0.8);
  changes.add_betas(0.9);
  HyperParameterOverrides overrides;
  ASSERT_OK(overrides.Set(spec, hp.group, changes));
  const GroupScalars g = MakeGroupScalars(adamw, hp, 3, overrides);
  const cpu::AdamScalars s =
      cpu::MakeAdamScalars(0.5, 0.8, 0.9, hp.eps, hp.weight_decay, true, 3);
  EXPECT_EQ(g.beta1, s.beta1);
  EXPECT_EQ(g.beta2, s.beta2);
  EXPECT_EQ(g.neg_step_size, s.neg_step_size);
  EXPECT_EQ(g.bias_correction2_sqrt, s.bias_correction2_sqrt);
  EXPECT_NE(g.beta1, MakeGroupScalars(adamw, hp, 3).beta1);
}

// ---- the kernel's work, emulated on the CPU ----

cpu::SgdScalars ToSgd(const GroupScalars& g) {
  cpu::SgdScalars s;
  s.neg_lr = g.neg_lr;
  s.weight_decay = g.sgd_weight_decay;
  s.momentum = g.momentum;
  s.one_minus_dampening = g.one_minus_dampening;
  s.nesterov = g.nesterov != 0;
  s.first_step = g.first_step != 0;
  return s;
}

cpu::AdamScalars ToAdam(const GroupScalars& g) {
  cpu::AdamScalars s;
  s.beta1 = g.beta1;
  s.one_minus_beta1 = g.one_minus_beta1;
  s.beta2 = g.beta2;
  s.one_minus_beta2 = g.one_minus_beta2;
  s.eps = g.eps;
  s.neg_step_size = g.neg_step_size;
  s.bias_correction2_sqrt = g.bias_correction2_sqrt;
  s.weight_decay = g.adam_weight_decay;
  s.decoupled = g.decoupled != 0;
  s.decay = g.decay;
  s.amsgrad = g.amsgrad != 0;
  return s;
}

cpu::AdagradScalars ToAdagrad(const GroupScalars& g) {
  cpu::AdagradScalars s;
  s.neg_clr = g.neg_clr;
  s.weight_decay = g.adagrad_weight_decay;
  s.eps = g.eps;
  return s;
}

cpu::RmspropScalars ToRmsprop(const GroupScalars& g) {
  cpu::RmspropScalars s;
  s.alpha = g.alpha;
  s.one_minus_alpha = g.one_minus_alpha;
  s.eps = g.eps;
  s.weight_decay = g.rmsprop_weight_decay;
  s.momentum = g.momentum;
  s.neg_lr = g.neg_lr;
  s.centered = g.centered != 0;
  return s;
}

cpu::LionScalars ToLion(const GroupScalars& g) {
  cpu::LionScalars s;
  s.beta1 = g.beta1;
  s.one_minus_beta1 = g.one_minus_beta1;
  s.beta2 = g.beta2;
  s.one_minus_beta2 = g.one_minus_beta2;
  s.neg_lr = g.neg_lr;
  s.decay = g.decay;
  return s;
}

// Steps `params` as the GPU would: every launch, every chunk, with the
// chunk's group scalars and state offset, over the plan's state arrays
// (`state[k]` empty where the plan keeps none).
void EmulateStep(const BucketPlan& plan, int64_t step, float* params,
                 const float* grads, std::vector<float> (&state)[3]) {
  for (int l = 0; l < static_cast<int>(plan.launches.size()); ++l) {
    const OptimizerLaunchParams launch =
        MakeLaunchParams(plan, l, plan.chunks.data(), step);
    for (int i = 0; i < launch.num_chunks; ++i) {
      const ChunkDescriptor& c = launch.chunks[i];
      const GroupScalars& g = launch.groups[c.group];
      // The chunk's part of array k, null where the plan keeps none.
      float* st[3];
      for (int k = 0; k < 3; ++k) {
        st[k] = (c.state_offset < 0 || !plan.keeps[k])
                    ? nullptr
                    : state[k].data() + c.state_offset;
      }
      float* p = params + c.offset;
      const float* gr = grads + c.offset;
      switch (plan.kind) {
        case kKernelSgd: {
          cpu::SgdScalars s = ToSgd(g);
          if (st[0] == nullptr) {
            ASSERT_EQ(s.momentum, 0.0f);
          }
          cpu::SgdStepReference(p, gr, st[0], c.numel, s);
          break;
        }
        case kKernelAdam:
          ASSERT_GE(c.state_offset, 0);
          if (g.amsgrad) {
            ASSERT_NE(st[2], nullptr);
          }
          cpu::AdamStepReference(p, gr, st[0], st[1], st[2], c.numel,
                                 ToAdam(g));
          break;
        case kKernelAdagrad:
          ASSERT_NE(st[0], nullptr);
          cpu::AdagradStepReference(p, gr, st[0], c.numel, ToAdagrad(g));
          break;
        case kKernelRmsprop:
          ASSERT_NE(st[0], nullptr);
          if (g.momentum != 0) {
            ASSERT_NE(st[1], nullptr);
          }
          if (g.centered) {
            ASSERT_NE(st[2], nullptr);
          }
          cpu::RmspropStepReference(p, gr, st[0], st[1], st[2], c.numel,
                                    ToRmsprop(g));
          break;
        case kKernelLion:
          ASSERT_NE(st[0], nullptr);
          cpu::LionStepReference(p, gr, st[0], c.numel, ToLion(g));
          break;
      }
    }
  }
}

class EmulationTest : public ::testing::TestWithParam<const char*> {};

TEST_P(EmulationTest, MatchesTheCpuShardOptimizerBitForBit) {
  const v1::OptimizerSpec spec = Spec(GetParam());
  // Small chunks and one group per launch: many launches and chunk seams.
  ASSERT_OK_AND_ASSIGN(BucketPlan plan,
                       PlanBucket(spec, 3, MixedSpans(), /*chunk_elements=*/64,
                                  /*max_groups_per_launch=*/1));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ShardOptimizer> cpu_opt,
                       ShardOptimizer::Create(spec));
  ASSERT_OK(cpu_opt->AddBucket(3, MixedSpans()));
  EXPECT_EQ(cpu_opt->state_bytes(3), plan.state_bytes());

  std::vector<float> init(plan.extent);
  for (int64_t i = 0; i < plan.extent; ++i) {
    init[i] = SymmetricUniformAt(SyntheticGradKey(1, 0, 0, 0), i);
  }
  std::vector<float> expected = init;
  std::vector<float> actual = init;
  // The device's state arrays, with the plan's starting values.
  std::vector<float> state[3];
  for (int k = 0; k < 3; ++k) {
    if (plan.keeps[k]) state[k].assign(plan.state_numel, 0.0f);
  }
  for (const BucketPlan::StateFill& fill : plan.fills) {
    std::fill(state[fill.array].begin() + fill.state_offset,
              state[fill.array].begin() + fill.state_offset + fill.numel,
              fill.value);
  }
  for (int64_t step = 1; step <= 4; ++step) {
    std::vector<float> grads(plan.extent);
    for (int64_t i = 0; i < plan.extent; ++i) {
      grads[i] = SymmetricUniformAt(SyntheticGradKey(1, 0, step, 0), i) * 0.5f;
    }
    ASSERT_OK(cpu_opt->Step(3, expected.data(), grads.data()));
    EmulateStep(plan, step, actual.data(), grads.data(), state);
  }
  for (int64_t i = 0; i < plan.extent; ++i) {
    uint32_t a, b;
    std::memcpy(&a, &actual[i], 4);
    std::memcpy(&b, &expected[i], 4);
    ASSERT_EQ(a, b) << "element " << i << ": " << actual[i] << " vs "
                    << expected[i];
  }
  // The gap was never touched.
  for (int64_t i = 40010; i < 40013; ++i) EXPECT_EQ(actual[i], init[i]);

  // The device's arrays read through the plan's state spans (what
  // GpuShardOptimizer::ViewState gives once it has downloaded them) are
  // the CPU optimizer's state, name for name and bit for bit, and the CPU's
  // export fits them (ImportState).
  StateArrays arrays{};
  for (int k = 0; k < 3; ++k) {
    if (plan.keeps[k]) arrays[k] = state[k].data();
  }
  const BucketStateView device = ViewStateArrays(plan.state_spans, 4, arrays);
  ASSERT_OK_AND_ASSIGN(const BucketStateView host, cpu_opt->ViewState(3));
  EXPECT_EQ(device.steps, host.steps);
  ASSERT_EQ(device.spans.size(), host.spans.size());
  for (size_t s = 0; s < host.spans.size(); ++s) {
    EXPECT_EQ(device.spans[s].name, host.spans[s].name);
    EXPECT_EQ(device.spans[s].numel, host.spans[s].numel);
    ASSERT_EQ(device.spans[s].tensors.size(), host.spans[s].tensors.size());
    for (size_t t = 0; t < host.spans[s].tensors.size(); ++t) {
      const auto& [device_name, device_values] = device.spans[s].tensors[t];
      const auto& [host_name, host_values] = host.spans[s].tensors[t];
      EXPECT_EQ(device_name, host_name);
      ASSERT_EQ(device_values.size(), host_values.size());
      EXPECT_EQ(std::memcmp(device_values.data(), host_values.data(),
                            host_values.size() * sizeof(float)),
                0)
          << host.spans[s].name << "." << host_name;
    }
  }
  ASSERT_OK_AND_ASSIGN(const BucketState exported, cpu_opt->ExportState(3));
  EXPECT_OK(CheckStateFits(3, plan.state_spans, exported));
}

INSTANTIATE_TEST_SUITE_P(AllKinds, EmulationTest,
                         ::testing::Values(kSgdJson, kAdamJson, kAdamWJson,
                                           kAdamScheduleJson, kSgdScheduleJson,
                                           kAdamAmsgradJson, kAdagradJson,
                                           kRmspropJson, kLionJson));

// The new kinds' plans: which arrays a bucket keeps, and Adagrad's starting
// values, per group.
TEST(PlanBucketTest, StateArraysFollowEachGroupsLayout) {
  ASSERT_OK_AND_ASSIGN(BucketPlan rmsprop,
                       PlanBucket(Spec(kRmspropJson), 0, MixedSpans()));
  EXPECT_EQ(rmsprop.kind, kKernelRmsprop);
  EXPECT_TRUE(rmsprop.keeps[0] && rmsprop.keeps[1] && rmsprop.keeps[2]);
  EXPECT_EQ(rmsprop.num_state_arrays, 3);
  EXPECT_EQ(rmsprop.state_bytes(), 3 * 40022 * 4);

  ASSERT_OK_AND_ASSIGN(
      BucketPlan plain,
      PlanBucket(Spec(R"({"kind": "RMSPROP", "hyperParameters": {"centered": true}})"),
                 0, MixedSpans()));
  EXPECT_TRUE(plain.keeps[0] && !plain.keeps[1] && plain.keeps[2]);
  EXPECT_EQ(plain.state_bytes(), 2 * 40022 * 4);

  ASSERT_OK_AND_ASSIGN(BucketPlan adagrad,
                       PlanBucket(Spec(kAdagradJson), 0, MixedSpans()));
  EXPECT_EQ(adagrad.kind, kKernelAdagrad);
  EXPECT_EQ(adagrad.num_state_arrays, 1);
  // One fill per span: w0 0.1, w0.bias 0.5, w1 0.1, w1.bias 0.5.
  ASSERT_EQ(adagrad.fills.size(), 4u);
  EXPECT_EQ(adagrad.fills[1].state_offset, 40000);
  EXPECT_EQ(adagrad.fills[1].numel, 10);
  EXPECT_EQ(adagrad.fills[1].value, static_cast<float>(0.5));
  EXPECT_EQ(adagrad.fills[2].value, static_cast<float>(0.1));

  ASSERT_OK_AND_ASSIGN(BucketPlan lion,
                       PlanBucket(Spec(kLionJson), 0, MixedSpans()));
  EXPECT_EQ(lion.kind, kKernelLion);
  EXPECT_EQ(lion.num_state_arrays, 1);
  const GroupScalars g = MakeGroupScalars(lion, lion.groups[0], 1);
  EXPECT_EQ(g.decay, static_cast<float>(1.0 - 0.001 * 0.5));
  EXPECT_EQ(g.neg_lr, -0.001f);
}

TEST(SyntheticTest, DeterministicBoundedAndKeyed) {
  const uint64_t key = SyntheticGradKey(42, 1, 3, 0);
  EXPECT_EQ(key, SyntheticGradKey(42, 1, 3, 0));
  EXPECT_NE(key, SyntheticGradKey(42, 2, 3, 0));
  EXPECT_NE(key, SyntheticGradKey(42, 1, 4, 0));
  EXPECT_NE(key, SyntheticGradKey(43, 1, 3, 0));
  EXPECT_NE(key, SyntheticGradKey(42, 1, 3, 1));
  double sum = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const float v = SymmetricUniformAt(key, i);
    ASSERT_GE(v, -1.0f);
    ASSERT_LT(v, 1.0f);
    sum += v;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.02);
  EXPECT_NE(SymmetricUniformAt(key, 0), SymmetricUniformAt(key, 1));
}

TEST(SyntheticTest, SameBitsAsTheCpuRandomFunctions) {
  const uint64_t seed = 0x1234567890abcdefULL;
  EXPECT_EQ(SyntheticGradKey(seed, 1, 2, 3),
            worker::StreamKey(seed, {kSyntheticTagGrad, 1, 2, 3}));
  EXPECT_EQ(SyntheticInitKey(seed, 5),
            worker::StreamKey(seed, {kSyntheticTagInit, 5}));
  for (uint64_t x : std::vector<uint64_t>{0, 1, ~uint64_t{0}, seed}) {
    EXPECT_EQ(Mix64(x), worker::Mix64(x));
  }
  const uint64_t key = SyntheticGradKey(seed, 0, 1, 0);
  const int64_t n = 100003;
  std::vector<float> cpu(n);
  worker::FillUniformSymmetric(key, cpu.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(SymmetricUniformAt(key, i), cpu[i]) << i;
  }
  // Past 2^31 elements FillUniformSymmetric re-keys each block.
  const int64_t block = int64_t{1} << 31;
  std::vector<float> second(17);
  worker::FillUniformSymmetric(worker::Mix64(key + block), second.data(), 17);
  for (int64_t j = 0; j < 17; ++j) {
    ASSERT_EQ(SymmetricUniformAt(key, block + j), second[j]) << j;
  }
}

TEST(SyntheticTest, ReproducesTheCpuSyntheticWorkload) {
  v1::SyntheticWorkload spec;
  spec.set_num_parameters(5000);
  spec.set_tensor_numel(1536);
  const uint64_t seed = 99;
  const int rank = 2;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SyntheticWorkload> workload,
                       SyntheticWorkload::Create(spec, seed, rank));
  const auto& params = workload->parameters();
  ASSERT_EQ(params.size(), 4u);
  std::vector<std::vector<float>> p(params.size()), g(params.size());
  std::vector<float*> pp, gp;
  for (size_t i = 0; i < params.size(); ++i) {
    p[i].resize(params[i].numel);
    g[i].resize(params[i].numel);
    pp.push_back(p[i].data());
    gp.push_back(g[i].data());
  }
  ASSERT_OK(workload->InitializeParameters(pp));
  struct CountingSink : GradientSink {
    void GradientReady(int) override { ++calls; }
    int calls = 0;
  } sink;
  std::vector<const float*> cpp(pp.begin(), pp.end());
  ASSERT_OK(workload->ComputeGradients(7, cpp, gp, sink).status());
  EXPECT_EQ(sink.calls, 4);
  for (size_t i = 0; i < params.size(); ++i) {
    for (int64_t j = 0; j < params[i].numel; ++j) {
      ASSERT_EQ(p[i][j], SymmetricUniformAt(SyntheticInitKey(seed, i), j));
      ASSERT_EQ(g[i][j],
                SymmetricUniformAt(SyntheticGradKey(seed, rank, 7, i), j));
    }
  }
}

}  // namespace
}  // namespace pshard::worker::gpu
