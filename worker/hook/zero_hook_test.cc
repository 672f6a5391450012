// The hook's unit tests: what FinishStep demands and how it fails (missing
// gradients, a missing peer, a bad or failing assignment, a bad schedule),
// and one exact SGD step on one rank.
#include "worker/hook/zero_hook.h"

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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


}  // namespace
}  // namespace pshard::worker
