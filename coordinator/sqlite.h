// A small RAII wrapper over the sqlite3 C API: a database handle, prepared
// statements and transactions. SQLite result codes become absl::Status here,
// once, with the failing SQL's purpose and sqlite3_errmsg in the message.
//
// Not thread-safe: callers serialise access (the coordinator holds its mutex
// around every use).
#ifndef PSHARD_COORDINATOR_SQLITE_H_
#define PSHARD_COORDINATOR_SQLITE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct sqlite3;
struct sqlite3_stmt;

namespace pshard {
namespace coordinator {

class SqliteStatement;

struct SqliteOptions {
  // FULL (the default): a transaction that committed survives a power loss
  // too (WAL synced at every commit). NORMAL: it survives a crash of this
  // process (kill -9), but a power loss may lose the last commits; never
  // corrupts the file.
  bool synchronous_full = true;
};

// The one owner of a database file: an exclusive flock on "<path>.lock"
// holding the owner's pid, released by the kernel when the process dies
// (kill -9 included), so a second opener stops at once and names the first.
class FileOwnerLock {
 public:
  // FailedPrecondition naming the holder's pid when another process (or
  // another open in this one) holds it; Unavailable when the lock file
  // cannot be created.
  static absl::StatusOr<FileOwnerLock> Acquire(const std::string& path);
  FileOwnerLock(FileOwnerLock&& other) noexcept;
  FileOwnerLock& operator=(FileOwnerLock&& other) noexcept;
  ~FileOwnerLock();

 private:
  explicit FileOwnerLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

class SqliteDatabase {
 public:
  // Opens (creating if needed) the database at `path` (":memory:" for a
  // private in-memory one), owned by this process alone: FileOwnerLock,
  // and SQLite's locking_mode=EXCLUSIVE, under which WAL keeps its index in
  // heap memory instead of a memory-mapped -shm file (which turns an I/O
  // error into SIGBUS). WAL with synchronous per `options`.
  //
  // Errors: FailedPrecondition if another process holds the file (naming
  // its pid); Unavailable if the file cannot be opened or is not a
  // database.
  static absl::StatusOr<std::unique_ptr<SqliteDatabase>> Open(
      const std::string& path, const SqliteOptions& options = {});

  ~SqliteDatabase();
  SqliteDatabase(const SqliteDatabase&) = delete;
  SqliteDatabase& operator=(const SqliteDatabase&) = delete;

  // Runs one or more statements without results. Errors: Internal.
  absl::Status Exec(absl::string_view sql);

  // Errors: Internal (syntax errors are programming errors, reported anyway).
  absl::StatusOr<SqliteStatement> Prepare(absl::string_view sql);

  sqlite3* handle() const { return db_; }
  absl::Status Error(absl::string_view what) const;

 private:
  SqliteDatabase(sqlite3* db, std::optional<FileOwnerLock> owner)
      : owner_(std::move(owner)), db_(db) {}
  std::optional<FileOwnerLock> owner_;  // none for ":memory:"; released last
  sqlite3* db_;
};

// A prepared statement. Bind indices are 1-based, column indices 0-based.
class SqliteStatement {
 public:
  SqliteStatement(SqliteStatement&& other) noexcept;
  SqliteStatement& operator=(SqliteStatement&& other) noexcept;
  ~SqliteStatement();

  SqliteStatement& Bind(int index, int64_t value);
  SqliteStatement& Bind(int index, absl::string_view text);
  SqliteStatement& BindBlob(int index, absl::string_view bytes);

  // Steps once: true when a row is available, false when done.
  // Errors: Internal (constraint violations, I/O errors, ...).
  absl::StatusOr<bool> Step();
  // Steps until done (for statements without results), then resets.
  absl::Status Run();
  void Reset();

  int64_t ColumnInt64(int column) const;
  std::string ColumnText(int column) const;
  std::string ColumnBlob(int column) const;

 private:
  friend class SqliteDatabase;
  SqliteStatement(const SqliteDatabase* db, sqlite3_stmt* stmt)
      : db_(db), stmt_(stmt) {}
  const SqliteDatabase* db_;
  sqlite3_stmt* stmt_;
  // First bind error, reported by Step().
  int bind_error_ = 0;
};

// BEGIN IMMEDIATE in the constructor; ROLLBACK in the destructor unless
// Commit() succeeded.
class SqliteTransaction {
 public:
  explicit SqliteTransaction(SqliteDatabase* db);
  ~SqliteTransaction();
  SqliteTransaction(const SqliteTransaction&) = delete;
  SqliteTransaction& operator=(const SqliteTransaction&) = delete;

  // The status of BEGIN.
  const absl::Status& status() const { return begin_; }
  absl::Status Commit();

 private:
  SqliteDatabase* db_;
  absl::Status begin_;
  bool done_ = false;
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_SQLITE_H_
