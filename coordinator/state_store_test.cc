#include "coordinator/state_store.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "coordinator/sqlite.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::HasSubstr;

// A database path in a fresh directory (no earlier run's file or WAL).
std::string TempPath(const std::string& name) {
  return absl::StrCat(::pshard::testing::MakeTempDir("db"), "/", name);
}

TEST(StateStoreTest, OneStateFileHasOneOwner) {
  const std::string path = TempPath("owned.db");
  {
    ASSERT_OK_AND_ASSIGN(auto first, StateStore::Open(path));
    StateStore::Batch batch;
    v1::Job job;
    job.set_id("job-1");
    batch.jobs.emplace_back(1, job);
    ASSERT_OK(first->Commit(batch));
    EXPECT_THAT(StateStore::Open(path),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr(absl::StrCat(
                             "in use by another coordinator (pid ", getpid()))));
    // WAL without shared memory: nothing is memory-mapped that an I/O error
    // could turn into SIGBUS.
    for (const std::string& name :
         ::pshard::testing::ListDirectory(path.substr(0, path.rfind('/')))) {
      EXPECT_THAT(name, ::testing::Not(::testing::EndsWith("-shm")));
    }
  }
  // The owner is gone: the next one opens it, with everything committed.
  ASSERT_OK_AND_ASSIGN(auto second, StateStore::Open(path));
  ASSERT_OK_AND_ASSIGN(StateStore::Snapshot snap, second->Load());
  EXPECT_EQ(snap.jobs.count(1), 1u);
}

TEST(StateStoreTest, RoundTripsEverythingThroughAFile) {
  const std::string path = TempPath("store.db");
  {
    ASSERT_OK_AND_ASSIGN(auto store, StateStore::Open(path));
    StateStore::Batch batch;
    v1::WorkerInfo w;
    w.set_id("w-3");
    w.set_name("pod-a");
    w.set_incarnation("i1");
    batch.workers.emplace_back(3, w);
    v1::Job job;
    job.set_id("job-2");
    job.set_state(v1::RUNNING);
    job.set_epoch(4);
    batch.jobs.emplace_back(2, job);
    for (int s = 1; s <= 3; ++s) {
      v1::JobEvent e;
      e.set_sequence(s);
      batch.events.emplace_back(2, e);
    }
    v1::ShardAssignment a;
    a.set_epoch(3);
    batch.assignments.emplace_back(2, a);
    a.set_epoch(4);
    batch.assignments.emplace_back(2, a);
    batch.finished_ranks.push_back({2, 4, 1});
    batch.finished_ranks.push_back({2, 3, 0});  // an old epoch: not loaded
    ASSERT_OK(store->Commit(batch));
    // Replacing a job keeps one row.
    job.set_state(v1::SUCCEEDED);
    StateStore::Batch again;
    again.jobs.emplace_back(2, job);
    ASSERT_OK(store->Commit(again));
  }
  ASSERT_OK_AND_ASSIGN(auto store, StateStore::Open(path));
  ASSERT_OK_AND_ASSIGN(StateStore::Snapshot snap, store->Load());
  ASSERT_EQ(snap.workers.size(), 1u);
  EXPECT_EQ(snap.workers[3].name(), "pod-a");
  ASSERT_EQ(snap.jobs.size(), 1u);
  EXPECT_EQ(snap.jobs[2].state(), v1::SUCCEEDED);
  ASSERT_EQ(snap.events[2].size(), 3u);
  EXPECT_EQ(snap.events[2][2].sequence(), 3);
  EXPECT_EQ(snap.assignments[2].epoch(), 4);
  EXPECT_EQ(snap.finished_ranks[2], std::set<int>({1}));
}

TEST(StateStoreTest, BatchIsAtomic) {
  ASSERT_OK_AND_ASSIGN(auto store, StateStore::Open(":memory:"));
  StateStore::Batch batch;
  v1::Job job;
  job.set_id("job-1");
  batch.jobs.emplace_back(1, job);
  v1::JobEvent e;
  e.set_sequence(1);
  batch.events.emplace_back(1, e);
  batch.events.emplace_back(1, e);  // duplicate key: the batch fails
  EXPECT_THAT(store->Commit(batch), StatusIs(absl::StatusCode::kInternal, HasSubstr("sqlite")));
  ASSERT_OK_AND_ASSIGN(StateStore::Snapshot snap, store->Load());
  EXPECT_TRUE(snap.jobs.empty());
  EXPECT_TRUE(snap.events.empty());
}

TEST(StateStoreTest, RejectsAFileThatIsNotADatabase) {
  const std::string path = TempPath("garbage.db");
  FILE* f = fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("this is not an sqlite database, not even close........................"
        "..................................................................",
        f);
  fclose(f);
  EXPECT_THAT(StateStore::Open(path), StatusIs(absl::StatusCode::kUnavailable, HasSubstr(path)));
}

TEST(StateStoreTest, CorruptBlobIsDataLoss) {
  const std::string path = TempPath("corrupt.db");
  {
    ASSERT_OK_AND_ASSIGN(auto store, StateStore::Open(path));
  }
  {
    ASSERT_OK_AND_ASSIGN(auto db, SqliteDatabase::Open(path));
    ASSERT_OK(db->Exec("INSERT INTO jobs(num, job) VALUES(1, x'ffffffff')"));
  }
  ASSERT_OK_AND_ASSIGN(auto store, StateStore::Open(path));
  EXPECT_THAT(store->Load(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("job 1")));
}

TEST(SqliteTest, StatementBindAndStep) {
  ASSERT_OK_AND_ASSIGN(auto db, SqliteDatabase::Open(":memory:"));
  ASSERT_OK(db->Exec("CREATE TABLE t(a INTEGER, b TEXT, c BLOB)"));
  ASSERT_OK_AND_ASSIGN(auto ins, db->Prepare("INSERT INTO t VALUES(?, ?, ?)"));
  ASSERT_OK(ins.Bind(1, int64_t{42}).Bind(2, "hi").BindBlob(3, std::string("\0x", 2)).Run());
  ASSERT_OK(ins.Bind(1, int64_t{43}).Bind(2, "").BindBlob(3, "").Run());
  ASSERT_OK_AND_ASSIGN(auto sel, db->Prepare("SELECT a, b, c FROM t ORDER BY a"));
  ASSERT_OK_AND_ASSIGN(bool row, sel.Step());
  ASSERT_TRUE(row);
  EXPECT_EQ(sel.ColumnInt64(0), 42);
  EXPECT_EQ(sel.ColumnText(1), "hi");
  EXPECT_EQ(sel.ColumnBlob(2), std::string("\0x", 2));
  ASSERT_OK_AND_ASSIGN(row, sel.Step());
  ASSERT_TRUE(row);
  EXPECT_EQ(sel.ColumnBlob(2), "");
  ASSERT_OK_AND_ASSIGN(row, sel.Step());
  EXPECT_FALSE(row);
  EXPECT_THAT(db->Prepare("SELEKT"), StatusIs(absl::StatusCode::kInternal, HasSubstr("prepare")));
}

TEST(SqliteTest, TransactionRollsBackUnlessCommitted) {
  ASSERT_OK_AND_ASSIGN(auto db, SqliteDatabase::Open(":memory:"));
  ASSERT_OK(db->Exec("CREATE TABLE t(a INTEGER)"));
  {
    SqliteTransaction txn(db.get());
    ASSERT_OK(txn.status());
    ASSERT_OK(db->Exec("INSERT INTO t VALUES(1)"));
  }
  {
    SqliteTransaction txn(db.get());
    ASSERT_OK(db->Exec("INSERT INTO t VALUES(2)"));
    ASSERT_OK(txn.Commit());
  }
  ASSERT_OK_AND_ASSIGN(auto sel, db->Prepare("SELECT COUNT(*), SUM(a) FROM t"));
  ASSERT_OK_AND_ASSIGN(bool row, sel.Step());
  ASSERT_TRUE(row);
  EXPECT_EQ(sel.ColumnInt64(0), 1);
  EXPECT_EQ(sel.ColumnInt64(1), 2);
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
