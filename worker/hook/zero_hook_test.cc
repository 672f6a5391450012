// The hook's unit tests: what FinishStep demands and how it fails (missing
// gradients, a missing peer, a bad or failing assignment, a bad schedule),
// and one exact SGD step on one rank.
#include "worker/hook/zero_hook.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/comm/fake_communicator.h"
#include "worker/hook/zero_hook_test_util.h"
#include "worker/optim/shard_optimizer.h"

namespace pshard::worker {
namespace {

using ::testing::HasSubstr;

TEST(ZeroHookTest, FinishStepNeedsEveryGradient) {
  FakeHub hub(1);
  auto comm = hub.Create(0);
  ASSERT_OK_AND_ASSIGN(auto hook, SimpleHook(comm.get(), AllToRankZero()));
  hook->GradientReady(1);
  EXPECT_THAT(hook->FinishStep(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("\"a\" was marked ready")));
}

TEST(ZeroHookTest, SingleRankSgdStep) {
  FakeHub hub(1);
  auto comm = hub.Create(0);
  ASSERT_OK_AND_ASSIGN(auto hook, SimpleHook(comm.get(), AllToRankZero()));
  for (int i = 0; i < 4; ++i) hook->params()[0][i] = 1;
  for (int i = 0; i < 2; ++i) hook->params()[1][i] = 2;
  for (int i = 0; i < 4; ++i) hook->grads()[0][i] = 1;
  for (int i = 0; i < 2; ++i) hook->grads()[1][i] = -2;
  hook->GradientReady(1);
  hook->GradientReady(0);
  ASSERT_OK(hook->FinishStep());
  EXPECT_EQ(hook->params()[0][3], 0.5f);
  EXPECT_EQ(hook->params()[1][0], 3.0f);
  EXPECT_THAT(hook->MarkGradientReady(5),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("5")));
  ASSERT_OK(hook->MarkGradientReady(0));
  EXPECT_THAT(hook->MarkGradientReady(0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("twice")));
}

TEST(ZeroHookTest, BadAssignmentIsRefused) {
  FakeHub hub(2);
  auto comm = hub.Create(0);
  ASSERT_OK_AND_ASSIGN(
      auto hook,
      SimpleHook(comm.get(),
                 [](const BucketLayout&) -> absl::StatusOr<BucketAssignment> {
                   return BucketAssignment{3, {5}};
                 }));
  hook->GradientReady(1);
  hook->GradientReady(0);
  EXPECT_THAT(hook->FinishStep(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("epoch 3) gives bucket 0 to rank 5")));
}

TEST(ZeroHookTest, ProviderErrorFailsTheStep) {
  FakeHub hub(1);
  auto comm = hub.Create(0);
  ASSERT_OK_AND_ASSIGN(
      auto hook,
      SimpleHook(comm.get(),
                 [](const BucketLayout&) -> absl::StatusOr<BucketAssignment> {
                   return absl::FailedPreconditionError("stale epoch 2");
                 }));
  hook->GradientReady(1);
  hook->GradientReady(0);
  EXPECT_THAT(hook->FinishStep(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "stale epoch 2"));
}

// A peer that never reaches the step: FinishStep fails after the
// communicator's timeout instead of hanging.
TEST(ZeroHookTest, MissingPeerFailsStepWithinTimeout) {
  FakeHub hub(2, absl::Milliseconds(300));
  auto comm = hub.Create(0);
  ASSERT_OK_AND_ASSIGN(auto hook, SimpleHook(comm.get(), AllToRankZero()));
  hook->GradientReady(1);
  hook->GradientReady(0);
  absl::Time start = absl::Now();
  EXPECT_THAT(hook->FinishStep(),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("step 1")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(ZeroHookTest, NegativeScheduleIsRefused) {
  FakeHub hub(1);
  auto comm = hub.Create(0);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ShardOptimizer> optimizer, Sgd());
  ZeroHookOptions options;
  options.broadcast_lag = -1;
  EXPECT_THAT(ZeroHook::Create({{"a", {4}, 4}}, comm.get(),
                               std::move(optimizer), AllToRankZero(), options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("broadcast_lag")));
}

// Resuming: a bucket whose parameters keep no optimizer state (SGD without
// momentum) still counts its steps, and its lr schedule goes on from the
// resumed step, not from step 1. StepLR halves the lr every step, so a
// schedule restarted at step 1 would double the third update.
class ResumedScheduleTest : public ::testing::Test {
 protected:
  // "a" keeps a momentum buffer (a_momentum > 0), "b" (its own group,
  // momentum 0) none; a bucket each.
  absl::StatusOr<std::unique_ptr<ZeroHook>> Hook(Communicator* comm,
                                                 double a_momentum = 0.5) {
    ASSIGN_OR_RETURN(v1::OptimizerSpec spec,
                     ParseOptimizerSpecJson(absl::StrCat(R"({
        "kind": "SGD", "hyper_parameters": {"lr": 1, "momentum": )",
                                                         a_momentum, R"(,
        "lr_schedule": {"kind": "STEP", "step_size": 1, "gamma": 0.5}},
        "param_groups": [{"params": ["b"],
                          "hyper_parameters": {"momentum": 0}}]})")));
    ASSIGN_OR_RETURN(std::unique_ptr<ShardOptimizer> optimizer,
                     ShardOptimizer::Create(spec));
    ZeroHookOptions options;
    options.bucket_cap_mb = 1e-6;
    options.timeout = absl::Seconds(5);
    return ZeroHook::Create({{"a", {2}, 2}, {"b", {2}, 2}}, comm,
                            std::move(optimizer), AllToRankZero(), options);
  }

  // Steps [first, last] with every gradient 1.
  static void Run(ZeroHook& hook, int first, int last) {
    for (int step = first; step <= last; ++step) {
      for (int i = 0; i < 2; ++i) {
        std::fill_n(hook.grads()[i], 2, 1.0f);
        hook.GradientReady(i);
      }
      ASSERT_OK(hook.FinishStep());
    }
  }
};

// Exported and loaded again: "b" keeps no state, so its entry is its step
// alone; with momentum 0 everywhere every entry is (plain SGD), and the
// loaded state still resumes the schedule. A step-only entry may come twice
// (every rank's state together); one with tensors may not.
TEST_F(ResumedScheduleTest, FromExportedState) {
  for (const double a_momentum : {0.5, 0.0}) {
    SCOPED_TRACE(absl::StrCat("a's momentum ", a_momentum));
    FakeHub hub(1);
    auto comm = hub.Create(0);
    ASSERT_OK_AND_ASSIGN(auto straight, Hook(comm.get(), a_momentum));
    for (int i = 0; i < 2; ++i) std::fill_n(straight->params()[i], 2, 0.0f);
    Run(*straight, 1, 2);
    ASSERT_OK_AND_ASSIGN(std::vector<ParameterOptimizerState> saved,
                         straight->ExportOptimizerState());
    ASSERT_EQ(saved.size(), 2u);
    const ParameterOptimizerState& b = saved[0].name == "b" ? saved[0] : saved[1];
    EXPECT_EQ(b.name, "b");
    EXPECT_EQ(b.step, 2);
    EXPECT_TRUE(b.tensors.empty());
    std::vector<float> after_two[2];
    for (int i = 0; i < 2; ++i) {
      after_two[i].assign(straight->params()[i], straight->params()[i] + 2);
    }
    EXPECT_EQ(after_two[1][0], -1.5f);  // lr 1, then 0.5
    Run(*straight, 3, 3);

    ASSERT_OK_AND_ASSIGN(auto resumed, Hook(comm.get(), a_momentum));
    for (int i = 0; i < 2; ++i) {
      std::copy_n(after_two[i].data(), 2, resumed->params()[i]);
    }
    std::vector<ParameterOptimizerState> twice = saved;
    twice.push_back(b);
    ASSERT_OK(resumed->SetInitialOptimizerState(twice));
    Run(*resumed, 3, 3);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(resumed->params()[i][0], straight->params()[i][0]) << i;
    }
    EXPECT_EQ(resumed->params()[1][0], -1.75f);  // lr 0.25 at step 3
  }
  FakeHub hub(1);
  auto comm = hub.Create(0);
  ASSERT_OK_AND_ASSIGN(auto hook, Hook(comm.get()));
  ParameterOptimizerState a;
  a.name = "a";
  a.step = 2;
  a.tensors = {{"momentum_buffer", {1, 1}}};
  EXPECT_THAT(hook->SetInitialOptimizerState({a, a}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("given twice")));
}

TEST_F(ResumedScheduleTest, FromACheckpointsLoader) {
  FakeHub hub(1);
  auto comm = hub.Create(0);
  ASSERT_OK_AND_ASSIGN(auto resumed, Hook(comm.get()));
  for (int i = 0; i < 2; ++i) std::fill_n(resumed->params()[i], 2, 0.0f);
  std::vector<std::string> asked;
  ASSERT_OK(resumed->SetOptimizerStateLoader(
      [&](const std::string& name, const std::vector<std::string>& names)
          -> absl::StatusOr<ParameterOptimizerState> {
        asked.push_back(name);
        ParameterOptimizerState state;
        state.name = name;
        state.step = 2;
        for (const std::string& n : names) {
          state.tensors.emplace_back(n, std::vector<float>(2, 0.0f));
        }
        return state;
      }));
  Run(*resumed, 3, 3);
  // Every owned parameter is asked for, "b" (no state) too.
  EXPECT_THAT(asked, ::testing::UnorderedElementsAre("a", "b"));
  EXPECT_EQ(resumed->params()[1][0], -0.25f);  // lr 0.25 at step 3
}

}  // namespace
}  // namespace pshard::worker
