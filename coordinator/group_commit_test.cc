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
  // The next batch is written again.
  const auto t3 = commit_->Seal(Job(3, "c"));
  EXPECT_OK(commit_->Await(t3));
  ASSERT_OK_AND_ASSIGN(StateStore::Snapshot snap, store_->Load());
  EXPECT_EQ(snap.jobs.size(), 1u);
  EXPECT_EQ(snap.jobs.count(3), 1u);
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
