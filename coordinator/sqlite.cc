#include "coordinator/sqlite.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pshard {
namespace coordinator {

absl::StatusOr<FileOwnerLock> FileOwnerLock::Acquire(const std::string& path) {
  const std::string lock_path = path + ".lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot create lock file ", lock_path, ": ", std::strerror(errno)));
  }
  FileOwnerLock lock(fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof(pid) - 1, 0);
    std::string holder = n > 0 ? std::string(pid, n) : "";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) {
      holder.pop_back();
    }
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, " is in use by another coordinator (pid ",
          holder.empty() ? "unknown" : holder, ", lock file ", lock_path,
          "); one state file has one coordinator"));
    }
    return absl::UnavailableError(absl::StrCat("cannot lock ", lock_path, ": ",
                                               std::strerror(err)));
  }
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, pid.data(), pid.size(), 0) !=
          static_cast<ssize_t>(pid.size())) {
    return absl::UnavailableError(absl::StrCat(
        "cannot write lock file ", lock_path, ": ", std::strerror(errno)));
  }
  return lock;
}

FileOwnerLock::FileOwnerLock(FileOwnerLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)) {}

FileOwnerLock& FileOwnerLock::operator=(FileOwnerLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

FileOwnerLock::~FileOwnerLock() {
  if (fd_ >= 0) ::close(fd_);  // closing drops the flock
}

absl::StatusOr<std::unique_ptr<SqliteDatabase>> SqliteDatabase::Open(
    const std::string& path, const SqliteOptions& options) {
  std::optional<FileOwnerLock> owner;
  if (path != ":memory:") {
    absl::StatusOr<FileOwnerLock> lock = FileOwnerLock::Acquire(path);
    if (!lock.ok()) return lock.status();
    owner = *std::move(lock);
  }
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
      nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(
        absl::StrCat("cannot open state database ", path, ": ", msg));
  }
  std::unique_ptr<SqliteDatabase> out(new SqliteDatabase(db, std::move(owner)));
  sqlite3_busy_timeout(db, 5000);
  // locking_mode before the first WAL access: no -shm file, no mmap at all.
  absl::Status s = out->Exec(absl::StrCat(
      "PRAGMA locking_mode=EXCLUSIVE; PRAGMA mmap_size=0; "
      "PRAGMA journal_mode=WAL; PRAGMA synchronous=",
      options.synchronous_full ? "FULL" : "NORMAL",
      "; PRAGMA foreign_keys=ON;"));
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot use state database ", path, ": ", s.message()));
  }
  return out;
}

SqliteDatabase::~SqliteDatabase() { sqlite3_close_v2(db_); }

absl::Status SqliteDatabase::Error(absl::string_view what) const {
  return absl::InternalError(
      absl::StrCat("sqlite: ", what, ": ", sqlite3_errmsg(db_)));
}

absl::Status SqliteDatabase::Exec(absl::string_view sql) {
  const std::string s(sql);
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, s.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat("sqlite: ", s.substr(0, 60), ": ", msg));
  }
  return absl::OkStatus();
}

absl::StatusOr<SqliteStatement> SqliteDatabase::Prepare(absl::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()),
                                    &stmt, nullptr);
  if (rc != SQLITE_OK) {
    return Error(absl::StrCat("prepare ", sql.substr(0, 60)));
  }
  return SqliteStatement(this, stmt);
}

SqliteStatement::SqliteStatement(SqliteStatement&& other) noexcept
    : db_(other.db_), stmt_(other.stmt_), bind_error_(other.bind_error_) {
  other.stmt_ = nullptr;
}

SqliteStatement& SqliteStatement::operator=(SqliteStatement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    db_ = other.db_;
    stmt_ = other.stmt_;
    bind_error_ = other.bind_error_;
    other.stmt_ = nullptr;
  }
  return *this;
}

SqliteStatement::~SqliteStatement() { sqlite3_finalize(stmt_); }

SqliteStatement& SqliteStatement::Bind(int index, int64_t value) {
  const int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK && bind_error_ == 0) bind_error_ = rc;
  return *this;
}

SqliteStatement& SqliteStatement::Bind(int index, absl::string_view text) {
  const int rc = sqlite3_bind_text64(stmt_, index, text.data(), text.size(),
                                     SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK && bind_error_ == 0) bind_error_ = rc;
  return *this;
}

SqliteStatement& SqliteStatement::BindBlob(int index, absl::string_view bytes) {
  // A zero-length blob must not be bound as NULL.
  static const char kEmpty = 0;
  const int rc = sqlite3_bind_blob64(stmt_, index,
                                     bytes.empty() ? &kEmpty : bytes.data(),
                                     bytes.size(), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK && bind_error_ == 0) bind_error_ = rc;
  return *this;
}

absl::StatusOr<bool> SqliteStatement::Step() {
  if (bind_error_ != 0) {
    const int rc = bind_error_;
    bind_error_ = 0;
    return absl::InternalError(
        absl::StrCat("sqlite: bind: ", sqlite3_errstr(rc)));
  }
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  absl::Status s = db_->Error(absl::StrCat("step ", sqlite3_sql(stmt_)));
  sqlite3_reset(stmt_);
  return s;
}

absl::Status SqliteStatement::Run() {
  for (;;) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
  }
  Reset();
  return absl::OkStatus();
}

void SqliteStatement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int64_t SqliteStatement::ColumnInt64(int column) const {
  return sqlite3_column_int64(stmt_, column);
}

std::string SqliteStatement::ColumnText(int column) const {
  const unsigned char* p = sqlite3_column_text(stmt_, column);
  const int n = sqlite3_column_bytes(stmt_, column);
  return p ? std::string(reinterpret_cast<const char*>(p), n) : std::string();
}

std::string SqliteStatement::ColumnBlob(int column) const {
  const void* p = sqlite3_column_blob(stmt_, column);
  const int n = sqlite3_column_bytes(stmt_, column);
  return p ? std::string(static_cast<const char*>(p), n) : std::string();
}

SqliteTransaction::SqliteTransaction(SqliteDatabase* db)
    : db_(db), begin_(db->Exec("BEGIN IMMEDIATE")) {}

SqliteTransaction::~SqliteTransaction() {
  if (begin_.ok() && !done_) db_->Exec("ROLLBACK").IgnoreError();
}

absl::Status SqliteTransaction::Commit() {
  if (!begin_.ok()) return begin_;
  absl::Status s = db_->Exec("COMMIT");
  if (s.ok()) done_ = true;
  return s;
}

}  // namespace coordinator
}  // namespace pshard
