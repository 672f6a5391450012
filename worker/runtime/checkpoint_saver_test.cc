// CheckpointSaver's snapshot copies only what this rank owns: under the
// SHARDED policy each rank's slice of a parameter, never the whole of it
// (a RankModel over real ZeroHooks on a FakeHub, counting the elements the
// saver asks it to copy).
#include "worker/runtime/checkpoint_saver.h"

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/fake_clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/comm/fake_communicator.h"
#include "worker/hook/zero_hook.h"
#include "worker/optim/shard_optimizer.h"
#include "worker/runtime/assignment_client.h"
#include "worker/runtime/rank_model.h"
#include "worker/runtime/unexpected_control_plane.h"

namespace pshard::worker {
namespace {

constexpr char kFingerprint[] =
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

// Records every ReportCheckpoint it takes (none while it is down, as a
// restarting coordinator); nothing else is called.
class CheckpointControlPlane : public UnexpectedControlPlane {
 public:
  absl::StatusOr<v1::ReportCheckpointResponse> ReportCheckpoint(
      const v1::ReportCheckpointRequest& request, absl::Duration) override {
    absl::MutexLock lock(&mu_);
    if (down_) return absl::UnavailableError("connection refused");
    reports_.push_back(request);
    return v1::ReportCheckpointResponse();
  }
  void set_down(bool down) {
    absl::MutexLock lock(&mu_);
    down_ = down;
  }
  std::vector<v1::ReportCheckpointRequest> reports() {
    absl::MutexLock lock(&mu_);
    return reports_;
  }

 private:
  absl::Mutex mu_;
  bool down_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<v1::ReportCheckpointRequest> reports_ ABSL_GUARDED_BY(mu_);
};

// A rank's model over its hook that notes every range it is asked to copy.
class CountingModel : public RankModel {
 public:
  CountingModel(ZeroHook* hook, std::vector<ParameterInfo> params)
      : hook_(hook), params_(std::move(params)) {}

  ZeroHook& hook() override { return *hook_; }
  const std::vector<ParameterInfo>& parameters() const override {
    return params_;
  }
  absl::Status CopyParameterRangeToHost(int index, int64_t offset,
                                        int64_t numel, float* out) override {
    const float* p = hook_->params()[index] + offset;
    std::copy(p, p + numel, out);
    return absl::OkStatus();
  }
  // What the saver reads: noted, then read as every model reads it.
  absl::Status CopyOwnedParameterRangeToHost(int index, int64_t offset,
                                             int64_t numel,
                                             float* out) override {
    copies.emplace_back(index, offset, numel);
    return RankModel::CopyOwnedParameterRangeToHost(index, offset, numel, out);
  }
  absl::Status UploadParameters(
      const std::vector<std::vector<float>>&) override {
    return absl::UnimplementedError("not needed here");
  }

  // (parameter index, offset, numel) of each copy.
  std::vector<std::tuple<int, int64_t, int64_t>> copies;

 private:
  ZeroHook* const hook_;
  const std::vector<ParameterInfo> params_;
};

std::vector<ParameterInfo> Params() {
  // One bucket (25 MB cap) of 96 elements: SHARDED gives 3 ranks 32 each
  // (ShardRanges, 16-element aligned), cutting parameters in two.
  return {{"a", {7, 8}, 56}, {"b", {28}, 28}, {"c", {3, 4}, 12}};
}

struct RankResult {
  std::vector<ZeroHook::OwnedParameter> owned;
  std::vector<std::tuple<int, int64_t, int64_t>> copies;
};

// Every rank steps once under `policy` and saves a checkpoint of step 1.
std::vector<RankResult> SaveOnEveryRank(v1::JobSpec::AssignmentPolicy policy,
                                        int world, const std::string& dir,
                                        CheckpointControlPlane& control) {
  FakeHub hub(world);
  std::vector<RankResult> results(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<Communicator> comm = hub.Create(rank);
      v1::OptimizerSpec spec;
      spec.set_kind(v1::OptimizerSpec::SGD);
      spec.mutable_hyper_parameters()->set_lr(0.1);
      spec.mutable_hyper_parameters()->set_momentum(0.9);
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<ShardOptimizer> optimizer,
                           ShardOptimizer::Create(spec));
      ASSERT_OK_AND_ASSIGN(
          std::unique_ptr<ZeroHook> hook,
          ZeroHook::Create(Params(), comm.get(), std::move(optimizer),
                           LocalAssignmentProvider(policy, world),
                           ZeroHookOptions()));
      for (size_t i = 0; i < Params().size(); ++i) {
        for (int64_t e = 0; e < Params()[i].numel; ++e) {
          hook->params()[i][e] = static_cast<float>(e);
          hook->grads()[i][e] = 1.0f;
        }
        ASSERT_OK(hook->MarkGradientReady(static_cast<int>(i)));
      }
      ASSERT_OK(hook->FinishStep());
      ASSERT_OK_AND_ASSIGN(results[rank].owned, hook->OwnedParameters());
      CountingModel model(hook.get(), Params());
      CheckpointSaver::Options options;
      options.dir = dir;
      options.fingerprint = kFingerprint;
      options.world_size = world;
      ASSERT_OK_AND_ASSIGN(
          std::unique_ptr<CheckpointSaver> saver,
          CheckpointSaver::Create(options,
                                  ResultSource{"job-1", 1, rank, "w-1"},
                                  &control, Clock::Real()));
      ASSERT_OK(saver->Start(1, model));
      saver->Finish(absl::Seconds(30));
      results[rank].copies = model.copies;
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

class CheckpointSaverTest
    : public ::testing::TestWithParam<v1::JobSpec::AssignmentPolicy> {};

TEST_P(CheckpointSaverTest, CopiesOnlyTheOwnedElements) {
  constexpr int kWorld = 3;
  const std::string dir = std::string(getenv("TEST_TMPDIR")) + "/ckpt-" +
                          v1::JobSpec::AssignmentPolicy_Name(GetParam());
  CheckpointControlPlane control;
  const std::vector<RankResult> results =
      SaveOnEveryRank(GetParam(), kWorld, dir, control);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());

  int64_t total = 0;
  for (const ParameterInfo& p : Params()) total += p.numel;
  int64_t copied_by_all = 0;
  for (int rank = 0; rank < kWorld; ++rank) {
    const RankResult& r = results[rank];
    // One copy per owned parameter, of exactly the owned range.
    ASSERT_EQ(r.copies.size(), r.owned.size()) << "rank " << rank;
    int64_t copied = 0;
    for (size_t k = 0; k < r.owned.size(); ++k) {
      const auto& [index, offset, numel] = r.copies[k];
      EXPECT_EQ(Params()[index].name, r.owned[k].name);
      EXPECT_EQ(offset, r.owned[k].offset) << r.owned[k].name;
      EXPECT_EQ(numel, r.owned[k].numel) << r.owned[k].name;
      copied += numel;
    }
    if (GetParam() == v1::JobSpec::SHARDED) {
      // Each rank copies its third, never a whole parameter it only partly
      // owns.
      EXPECT_EQ(copied, total / kWorld) << "rank " << rank;
    }
    copied_by_all += copied;
  }
  // Together the ranks copy every element exactly once.
  EXPECT_EQ(copied_by_all, total);
  // Every rank's shard was written.
  const std::vector<v1::ReportCheckpointRequest> reports = control.reports();
  ASSERT_EQ(reports.size(), static_cast<size_t>(kWorld));
  for (const v1::ReportCheckpointRequest& report : reports) {
    EXPECT_TRUE(report.ok()) << report.error();
    EXPECT_EQ(report.step(), 1);
  }
}

std::vector<int64_t> ReportedSteps(CheckpointControlPlane& control) {
  std::vector<int64_t> steps;
  for (const v1::ReportCheckpointRequest& r : control.reports()) {
    EXPECT_TRUE(r.ok()) << r.error();
    steps.push_back(r.step());
  }
  return steps;
}

// One rank, stepped once, saving through `control` on `clock`.
struct OneRank {
  explicit OneRank(CheckpointControlPlane& control, const Clock& clock,
                   const std::string& dir)
      : hub(1), comm(hub.Create(0)) {
    v1::OptimizerSpec spec;
    spec.set_kind(v1::OptimizerSpec::SGD);
    spec.mutable_hyper_parameters()->set_lr(0.1);
    auto optimizer = ShardOptimizer::Create(spec);
    EXPECT_OK(optimizer);
    auto created = ZeroHook::Create(
        Params(), comm.get(), *std::move(optimizer),
        LocalAssignmentProvider(v1::JobSpec::BALANCED, 1), ZeroHookOptions());
    EXPECT_OK(created);
    hook = *std::move(created);
    for (size_t i = 0; i < Params().size(); ++i) {
      EXPECT_OK(hook->MarkGradientReady(static_cast<int>(i)));
    }
    EXPECT_OK(hook->FinishStep());
    model = std::make_unique<CountingModel>(hook.get(), Params());
    CheckpointSaver::Options options;
    options.dir = dir;
    options.fingerprint = kFingerprint;
    auto made = CheckpointSaver::Create(
        options, ResultSource{"job-1", 1, 0, "w-1"}, &control, clock);
    EXPECT_OK(made);
    saver = *std::move(made);
  }
  FakeHub hub;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<ZeroHook> hook;
  std::unique_ptr<CountingModel> model;
  std::unique_ptr<CheckpointSaver> saver;
};

// A coordinator that cannot take a shard's report (restarting: its clients
// fail fast until they reconnect) gets it later, in order: at the next
// checkpoint call once kRetryPause has passed, or in Finish. Lost, the
// checkpoint would never complete.
TEST(CheckpointSaverReportTest, AReportTheCoordinatorCouldNotTakeIsSentLater) {
  CheckpointControlPlane control;
  FakeClock clock;
  OneRank rank(control, clock,
               std::string(getenv("TEST_TMPDIR")) + "/ckpt-unsent");
  control.set_down(true);
  ASSERT_OK(rank.saver->Start(1, *rank.model));
  // Step 1's write is reported here: the coordinator is down.
  ASSERT_OK(rank.saver->Start(2, *rank.model));
  EXPECT_THAT(ReportedSteps(control), ::testing::IsEmpty());
  control.set_down(false);
  rank.saver->Poll();  // within kRetryPause of the failure: no new try
  EXPECT_THAT(ReportedSteps(control), ::testing::IsEmpty());
  clock.Advance(CheckpointSaver::kRetryPause);
  rank.saver->Poll();  // step 1, and step 2 too if its write has ended
  const std::vector<int64_t> polled = ReportedSteps(control);
  ASSERT_FALSE(polled.empty());
  EXPECT_EQ(polled.front(), 1);
  rank.saver->Finish(absl::Seconds(30));
  EXPECT_THAT(ReportedSteps(control), ::testing::ElementsAre(1, 2));
}

// A coordinator that never comes back: Finish tries until its timeout, then
// gives the reports up (and returns).
TEST(CheckpointSaverReportTest, FinishGivesUpOnAnUnreachableCoordinator) {
  CheckpointControlPlane control;
  FakeClock clock;
  clock.set_advance_on_sleep(true);
  OneRank rank(control, clock,
               std::string(getenv("TEST_TMPDIR")) + "/ckpt-gone");
  control.set_down(true);
  ASSERT_OK(rank.saver->Start(1, *rank.model));
  const absl::Time start = clock.Now();
  rank.saver->Finish(absl::Seconds(5));
  EXPECT_GE(clock.Now() - start, absl::Seconds(5));
  control.set_down(false);
  rank.saver->Finish(absl::Seconds(5));  // nothing is left to send
  EXPECT_THAT(ReportedSteps(control), ::testing::IsEmpty());
}

INSTANTIATE_TEST_SUITE_P(Policies, CheckpointSaverTest,
                         ::testing::Values(v1::JobSpec::BALANCED,
                                           v1::JobSpec::SHARDED),
                         [](const auto& info) {
                           return v1::JobSpec::AssignmentPolicy_Name(
                               info.param);
                         });

}  // namespace
}  // namespace pshard::worker
