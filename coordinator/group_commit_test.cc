#include "coordinator/group_commit.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/status_matchers.h"
#include "coordinator/fault_state_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::HasSubstr;

StateStore::Batch Job(int64_t num, const std::string& id) {
  StateStore::Batch batch;
  v1::Job job;
  job.set_id(id);
  batch.jobs.emplace_back(num, job);
  return batch;
}

class GroupCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto inner = StateStore::Open(":memory:");
    ASSERT_OK(inner);
    store_ = std::make_unique<FaultStateStore>(*std::move(inner));
    commit_ = std::make_unique<GroupCommit>(store_.get());
  }
  std::unique_ptr<FaultStateStore> store_;
  std::unique_ptr<GroupCommit> commit_;
};

TEST_F(GroupCommitTest, AnEmptyBatchHasNoTicketAndNeedsNoWrite) {
  EXPECT_EQ(commit_->Seal(StateStore::Batch{}), 0u);
  EXPECT_EQ(commit_->LastSealed(), 0u);
  EXPECT_TRUE(commit_->Written(0));
  EXPECT_OK(commit_->Await(0));
  EXPECT_EQ(store_->commits(), 0);
}

TEST_F(GroupCommitTest, OneAwaitWritesEverySealedBatchInOneCommitInOrder) {
  const auto t1 = commit_->Seal(Job(1, "first"));
  const auto t2 = commit_->Seal(Job(1, "second"));
  const auto t3 = commit_->Seal(Job(2, "other"));
  EXPECT_EQ(t1, 1u);
  EXPECT_EQ(t3, 3u);
  EXPECT_EQ(commit_->LastSealed(), 3u);
  EXPECT_FALSE(commit_->Written(t1));
  EXPECT_OK(commit_->Await(t2));
  EXPECT_TRUE(commit_->Written(t3));
  EXPECT_OK(commit_->Await(t1));
  EXPECT_OK(commit_->Await(t3));
  EXPECT_EQ(store_->commits(), 1);
  ASSERT_OK_AND_ASSIGN(StateStore::Snapshot snap, store_->Load());
  EXPECT_EQ(snap.jobs[1].id(), "second");  // the later row replaced the first
  EXPECT_EQ(snap.jobs[2].id(), "other");
}

TEST_F(GroupCommitTest, AFailedWriteIsTheOutcomeOfEveryBatchItHeld) {
  store_->FailCommits(1, absl::InternalError("disk full"));
  const auto t1 = commit_->Seal(Job(1, "a"));
  const auto t2 = commit_->Seal(Job(2, "b"));
  EXPECT_THAT(commit_->Await(t2),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("disk full")));
  EXPECT_THAT(commit_->Await(t1),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("disk full")));
  EXPECT_THAT(commit_->health(), StatusIs(absl::StatusCode::kInternal, ::testing::_));
  // Stopped: a batch sealed after the failure rests on it and is not
  // written, although the store would take it now.
  ASSERT_TRUE(commit_->failed());
  const auto t3 = commit_->Seal(Job(3, "c"));
  EXPECT_THAT(commit_->Await(t3),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("disk full")));
  EXPECT_EQ(store_->commits(), 1);
  // Settling names every record the failed batches held, and fails t3 too.
  const auto t4 = commit_->Seal(Job(4, "d"));
  EXPECT_EQ(commit_->Unsettled(), t4);
  uint64_t which = 0;
  ASSERT_OK_AND_ASSIGN(StateStore::Snapshot committed,
                       commit_->LoadCommitted(&which));
  EXPECT_TRUE(committed.jobs.empty());
  EXPECT_FALSE(commit_->TakeFailure(which + 1).has_value());  // not that one
  std::optional<GroupCommit::Failure> failure = commit_->TakeFailure(which);
  ASSERT_TRUE(failure.has_value());
  EXPECT_THAT(failure->error, StatusIs(absl::StatusCode::kInternal,
                                       HasSubstr("disk full")));
  EXPECT_THAT(failure->jobs, ::testing::ElementsAre(1, 2, 3, 4));
  EXPECT_FALSE(commit_->failed());
  EXPECT_FALSE(commit_->TakeFailure(which).has_value());
  EXPECT_THAT(commit_->LoadCommitted(&which),
              StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
  EXPECT_EQ(commit_->Unsettled(), 0u);
  EXPECT_THAT(commit_->Await(t4),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("disk full")));
  // The next batch is written again, and health follows it.
  const auto t5 = commit_->Seal(Job(5, "e"));
  EXPECT_EQ(commit_->Unsettled(), t5);
  EXPECT_OK(commit_->Await(t5));
  EXPECT_OK(commit_->health());
  ASSERT_OK_AND_ASSIGN(StateStore::Snapshot snap, store_->Load());
  EXPECT_EQ(snap.jobs.size(), 1u);
  EXPECT_EQ(snap.jobs.count(5), 1u);
}

TEST_F(GroupCommitTest, AProbeReportsWhetherTheStoreCanCommit) {
  EXPECT_OK(commit_->Probe());
  store_->FailCommits(-1, absl::InternalError("database or disk is full"));
  EXPECT_THAT(commit_->Probe(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("disk is full")));
  EXPECT_THAT(commit_->health(), StatusIs(absl::StatusCode::kInternal, ::testing::_));
  store_->Heal();
  EXPECT_OK(commit_->Probe());
  EXPECT_OK(commit_->health());
  EXPECT_EQ(store_->commits(), 0);  // a probe writes no state
}

TEST_F(GroupCommitTest, ConcurrentCallersAllSeeTheirBatchDurable) {
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  std::vector<absl::Status> outcomes(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([this, i, &outcomes] {
      const auto t = commit_->Seal(Job(i + 1, "j"));
      outcomes[i] = commit_->Await(t);
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : outcomes) EXPECT_OK(s);
  EXPECT_LE(store_->commits(), kThreads);
  ASSERT_OK_AND_ASSIGN(StateStore::Snapshot snap, store_->Load());
  EXPECT_EQ(snap.jobs.size(), static_cast<size_t>(kThreads));
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
