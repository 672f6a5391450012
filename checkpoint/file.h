// POSIX file helpers for the checkpoint package: an owning file descriptor,
// errno turned into absl::Status naming the file, full reads and writes, and
// the durable-rename sequence (write a temporary, fsync it, rename it, fsync
// the directory) that every checkpoint file goes through.
#ifndef PSHARD_CHECKPOINT_FILE_H_
#define PSHARD_CHECKPOINT_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pshard::checkpoint {

// Owns a file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release();
  // Closes now; returns close()'s result (0, or -1 with errno set).
  int Close();

 private:
  int fd_ = -1;
};

// "<what> '<path>': <strerror>" with a code that says what happened:
// NotFound (ENOENT), PermissionDenied (EACCES, EPERM), ResourceExhausted (a
// full disk or quota, or a file over the process's size limit: ENOSPC,
// EDQUOT, EFBIG), Internal otherwise.
absl::Status ErrnoError(absl::string_view what, absl::string_view path,
                        int err);

// Reads exactly `size` bytes at `offset`. InvalidArgument if the file ends
// first (it shrank since its size was checked).
absl::Status PreadFully(int fd, void* buffer, int64_t size, int64_t offset,
                        absl::string_view path);

// Writes all of `bytes`, retrying short writes and EINTR.
absl::Status WriteFully(int fd, absl::string_view bytes,
                        absl::string_view path);

// The directory part of `path` ("." when it has none).
std::string DirectoryOf(absl::string_view path);

// Makes a directory entry change (create, rename, unlink) in `dir` durable.
absl::Status FsyncDirectory(const std::string& dir);

// Creates `dir` if it does not exist (one level; the parent must exist) and
// fsyncs the parent so the new entry survives a crash.
absl::Status MakeDirectoryDurably(const std::string& dir);

// A temporary file beside `path` that becomes `path` only through Commit():
// fsync, rename over `path`, fsync the directory. Destroying it without a
// successful Commit() removes the temporary, so readers only ever see the
// old file or the complete new one.
class AtomicFile {
 public:
  // Internal / NotFound / PermissionDenied from mkostemp naming `path`.
  static absl::StatusOr<AtomicFile> Create(const std::string& path);

  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

  // Errors name the final path. After an error the temporary is gone.
  absl::Status Commit();

 private:
  AtomicFile(std::string path, std::string temp_path, UniqueFd fd);
  void Abandon();

  std::string path_;
  std::string temp_path_;
  UniqueFd fd_;
  bool committed_ = false;
};

// Writes `contents` to `path` through an AtomicFile.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents);

// A regular file open for reading, with its size when opened.
struct OpenFile {
  UniqueFd fd;
  int64_t size = 0;
};
// NotFound / PermissionDenied / Internal as ErrnoError; InvalidArgument when
// `path` is not a regular file.
absl::StatusOr<OpenFile> OpenRegularFile(const std::string& path);

// Reads a whole file of at most `max_bytes`. InvalidArgument when larger.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path,
                                          int64_t max_bytes);

}  // namespace pshard::checkpoint

#endif  // PSHARD_CHECKPOINT_FILE_H_
