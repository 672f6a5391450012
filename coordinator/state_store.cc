#include "coordinator/state_store.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/sqlite.h"

namespace pshard {
namespace coordinator {
namespace {

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS workers(
  num INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, info BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS jobs(num INTEGER PRIMARY KEY, job BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS events(
  job_num INTEGER NOT NULL, sequence INTEGER NOT NULL, event BLOB NOT NULL,
  PRIMARY KEY(job_num, sequence));
CREATE TABLE IF NOT EXISTS assignments(
  job_num INTEGER NOT NULL, epoch INTEGER NOT NULL, assignment BLOB NOT NULL,
  PRIMARY KEY(job_num, epoch));
CREATE TABLE IF NOT EXISTS finished_ranks(
  job_num INTEGER NOT NULL, epoch INTEGER NOT NULL, rank INTEGER NOT NULL,
  PRIMARY KEY(job_num, epoch, rank));
CREATE TABLE IF NOT EXISTS probe(id INTEGER PRIMARY KEY, n INTEGER NOT NULL);
)sql";

template <typename Proto>
absl::Status ParseBlob(const std::string& blob, absl::string_view what,
                       int64_t key, Proto* out) {
  if (!out->ParseFromString(blob)) {
    return absl::DataLossError(
        absl::StrCat("state database: ", what, " ", key, " does not parse"));
  }
  return absl::OkStatus();
}

// The SQLite store behind StateStore (schema in state_store.h).
class SqliteStateStore final : public StateStore {
 public:
  explicit SqliteStateStore(std::unique_ptr<SqliteDatabase> db)
      : db_(std::move(db)) {}
  absl::StatusOr<Snapshot> Load() override;
  absl::Status Commit(const Batch& batch) override;
  absl::Status Probe() override;

 private:
  const std::unique_ptr<SqliteDatabase> db_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(
    const std::string& path, const SqliteOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteDatabase> db,
                   SqliteDatabase::Open(path, options));
  absl::Status s = db->Exec(kSchema);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat(
        path, " is not a usable pshard state database: ", s.message()));
  }
  return std::make_unique<SqliteStateStore>(std::move(db));
}

absl::StatusOr<StateStore::Snapshot> SqliteStateStore::Load() {
  Snapshot snap;
  {
    ASSIGN_OR_RETURN(SqliteStatement st,
                     db_->Prepare("SELECT num, info FROM workers ORDER BY num"));
    for (;;) {
      ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      const int64_t num = st.ColumnInt64(0);
      RETURN_IF_ERROR(
          ParseBlob(st.ColumnBlob(1), "worker", num, &snap.workers[num]));
    }
  }
  {
    ASSIGN_OR_RETURN(SqliteStatement st,
                     db_->Prepare("SELECT num, job FROM jobs ORDER BY num"));
    for (;;) {
      ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      const int64_t num = st.ColumnInt64(0);
      RETURN_IF_ERROR(ParseBlob(st.ColumnBlob(1), "job", num, &snap.jobs[num]));
    }
  }
  {
    ASSIGN_OR_RETURN(
        SqliteStatement st,
        db_->Prepare("SELECT job_num, sequence, event FROM events "
                     "ORDER BY job_num, sequence"));
    for (;;) {
      ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      const int64_t num = st.ColumnInt64(0);
      v1::JobEvent event;
      RETURN_IF_ERROR(ParseBlob(st.ColumnBlob(2), "event of job", num, &event));
      snap.events[num].push_back(std::move(event));
    }
  }
  {
    ASSIGN_OR_RETURN(
        SqliteStatement st,
        db_->Prepare("SELECT job_num, assignment FROM assignments "
                     "ORDER BY job_num, epoch"));
    for (;;) {
      ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      const int64_t num = st.ColumnInt64(0);
      RETURN_IF_ERROR(ParseBlob(st.ColumnBlob(1), "assignment of job", num,
                                &snap.assignments[num]));
    }
  }
  {
    ASSIGN_OR_RETURN(
        SqliteStatement st,
        db_->Prepare("SELECT job_num, epoch, rank FROM finished_ranks"));
    for (;;) {
      ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      const int64_t num = st.ColumnInt64(0);
      auto it = snap.jobs.find(num);
      if (it != snap.jobs.end() && it->second.epoch() == st.ColumnInt64(1)) {
        snap.finished_ranks[num].insert(static_cast<int>(st.ColumnInt64(2)));
      }
    }
  }
  return snap;
}

absl::Status SqliteStateStore::Commit(const Batch& batch) {
  if (batch.empty()) return absl::OkStatus();
  SqliteTransaction txn(db_.get());
  RETURN_IF_ERROR(txn.status());
  if (!batch.workers.empty()) {
    ASSIGN_OR_RETURN(
        SqliteStatement st,
        db_->Prepare("INSERT OR REPLACE INTO workers(num, name, info) "
                     "VALUES(?, ?, ?)"));
    for (const auto& [num, info] : batch.workers) {
      RETURN_IF_ERROR(st.Bind(1, num)
                          .Bind(2, info.name())
                          .BindBlob(3, info.SerializeAsString())
                          .Run());
    }
  }
  if (!batch.jobs.empty()) {
    ASSIGN_OR_RETURN(
        SqliteStatement st,
        db_->Prepare("INSERT OR REPLACE INTO jobs(num, job) VALUES(?, ?)"));
    for (const auto& [num, job] : batch.jobs) {
      RETURN_IF_ERROR(st.Bind(1, num).BindBlob(2, job.SerializeAsString()).Run());
    }
  }
  if (!batch.events.empty()) {
    ASSIGN_OR_RETURN(
        SqliteStatement st,
        db_->Prepare("INSERT INTO events(job_num, sequence, event) "
                     "VALUES(?, ?, ?)"));
    for (const auto& [num, event] : batch.events) {
      RETURN_IF_ERROR(st.Bind(1, num)
                          .Bind(2, event.sequence())
                          .BindBlob(3, event.SerializeAsString())
                          .Run());
    }
  }
  if (!batch.assignments.empty()) {
    ASSIGN_OR_RETURN(
        SqliteStatement st,
        db_->Prepare("INSERT OR REPLACE INTO assignments(job_num, epoch, "
                     "assignment) VALUES(?, ?, ?)"));
    for (const auto& [num, a] : batch.assignments) {
      RETURN_IF_ERROR(st.Bind(1, num)
                          .Bind(2, a.epoch())
                          .BindBlob(3, a.SerializeAsString())
                          .Run());
    }
  }
  if (!batch.finished_ranks.empty()) {
    ASSIGN_OR_RETURN(
        SqliteStatement st,
        db_->Prepare("INSERT OR REPLACE INTO finished_ranks(job_num, epoch, "
                     "rank) VALUES(?, ?, ?)"));
    for (const auto& f : batch.finished_ranks) {
      RETURN_IF_ERROR(st.Bind(1, f.job_num)
                          .Bind(2, f.epoch)
                          .Bind(3, int64_t{f.rank})
                          .Run());
    }
  }
  return txn.Commit();
}

absl::Status SqliteStateStore::Probe() {
  SqliteTransaction txn(db_.get());
  RETURN_IF_ERROR(txn.status());
  RETURN_IF_ERROR(db_->Exec(
      "INSERT INTO probe(id, n) VALUES(1, 1) "
      "ON CONFLICT(id) DO UPDATE SET n = n + 1"));
  return txn.Commit();
}

}  // namespace coordinator
}  // namespace pshard
