#include "coordinator/fault_state_store.h"

#include <memory>
#include <utility>

#include "common/fake_clock.h"
#include "common/status_matchers.h"
#include "coordinator/coordinator.h"
#include "coordinator/state_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::HasSubstr;

StateStore::Batch OneJob(int64_t num) {
  StateStore::Batch batch;
  v1::Job job;
  job.set_id("job-x");
  batch.jobs.emplace_back(num, job);
  return batch;
}

TEST(FaultStateStoreTest, FailsTheArmedCommitsAndWritesNothingForThem) {
  ASSERT_OK_AND_ASSIGN(auto inner, StateStore::Open(":memory:"));
  FaultStateStore store(std::move(inner));
  store.FailCommits(1, absl::InternalError("disk full"));
  EXPECT_THAT(store.Commit(OneJob(1)),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("disk full")));
  EXPECT_OK(store.Commit(OneJob(2)));
  // Empty batches are not writes: they neither fail nor count.
  store.FailCommits(-1, absl::InternalError("I/O error"));
  EXPECT_OK(store.Commit(StateStore::Batch{}));
  EXPECT_THAT(store.Commit(OneJob(3)), StatusIs(absl::StatusCode::kInternal, HasSubstr("I/O error")));
  EXPECT_THAT(store.Commit(OneJob(4)), StatusIs(absl::StatusCode::kInternal, HasSubstr("I/O error")));
  store.Heal();
  EXPECT_EQ(store.commits(), 4);
  EXPECT_EQ(store.failed_commits(), 3);
  ASSERT_OK_AND_ASSIGN(StateStore::Snapshot snap, store.Load());
  EXPECT_EQ(snap.jobs.size(), 1u);
  EXPECT_EQ(snap.jobs.count(2), 1u);
}

TEST(FaultStateStoreTest, FailsOnlyAfterTheCommitsItLetsThrough) {
  ASSERT_OK_AND_ASSIGN(auto inner, StateStore::Open(":memory:"));
  FaultStateStore store(std::move(inner));
  store.FailCommits(1, absl::InternalError("crash"), /*after=*/2);
  EXPECT_OK(store.Commit(OneJob(1)));
  EXPECT_OK(store.Commit(StateStore::Batch{}));  // not a write: not counted
  EXPECT_OK(store.Commit(OneJob(2)));
  EXPECT_THAT(store.Commit(OneJob(3)),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("crash")));
  EXPECT_OK(store.Commit(OneJob(4)));
  EXPECT_EQ(store.failed_commits(), 1);
  ASSERT_OK_AND_ASSIGN(StateStore::Snapshot snap, store.Load());
  EXPECT_EQ(snap.jobs.size(), 3u);
  EXPECT_EQ(snap.jobs.count(3), 0u);
}

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.set_name("test");
  spec.set_world_size(1);
  spec.mutable_synthetic()->set_num_parameters(1000);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_lr(0.1);
  spec.set_steps(10);
  return spec;
}

// The coordinator answers a change only once it is durable: a failed write
// is the caller's error (Unavailable, with the store's), and the
// coordinator goes on once the store heals.
TEST(FaultStateStoreTest, CoordinatorReportsAFailedCommitToItsCaller) {
  FakeClock clock;
  ASSERT_OK_AND_ASSIGN(auto inner, StateStore::Open(":memory:"));
  auto owned = std::make_unique<FaultStateStore>(std::move(inner));
  FaultStateStore* store = owned.get();
  ASSERT_OK_AND_ASSIGN(
      auto c, Coordinator::Create(CoordinatorOptions(), &clock,
                                  std::move(owned)));

  store->FailCommits(1, absl::InternalError("disk full"));
  EXPECT_THAT(c->SubmitJob(Spec()),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("disk full")));
  v1::RegisterWorkerRequest reg;
  reg.set_name("pod-a");
  reg.set_incarnation("inc-1");
  reg.set_device_kind(v1::CPU);
  store->FailCommits(1, absl::InternalError("I/O error"));
  EXPECT_THAT(c->RegisterWorker(reg),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("I/O error")));
  EXPECT_EQ(store->failed_commits(), 2);

  // Healed: the next changes are written and answered.
  ASSERT_OK_AND_ASSIGN(v1::Job job, c->SubmitJob(Spec()));
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_OK(c->RegisterWorker(reg));
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
