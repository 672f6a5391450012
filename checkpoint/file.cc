#include "checkpoint/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pshard::checkpoint {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.Release();
  }
  return *this;
}

UniqueFd::~UniqueFd() { Close(); }

int UniqueFd::Release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

int UniqueFd::Close() {
  if (fd_ < 0) return 0;
  const int rc = ::close(fd_);
  fd_ = -1;
  return rc;
}

absl::Status ErrnoError(absl::string_view what, absl::string_view path,
                        int err) {
  const std::string message =
      absl::StrCat(what, " '", path, "': ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status PreadFully(int fd, void* buffer, int64_t size, int64_t offset,
                        absl::string_view path) {
  char* out = static_cast<char*>(buffer);
  while (size > 0) {
    const ssize_t got = ::pread(fd, out, static_cast<size_t>(size), offset);
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot read", path, errno);
    }
    if (got == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": file shrank while being read"));
    }
    out += got;
    size -= got;
    offset += got;
  }
  return absl::OkStatus();
}

absl::Status WriteFully(int fd, absl::string_view bytes,
                        absl::string_view path) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t put = ::write(fd, p, left);
    if (put < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path, errno);
    }
    p += put;
    left -= static_cast<size_t>(put);
  }
  return absl::OkStatus();
}

std::string DirectoryOf(absl::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

absl::Status FsyncDirectory(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError("cannot open directory", dir, errno);
  if (::fsync(fd.get()) != 0) {
    return ErrnoError("cannot fsync directory", dir, errno);
  }
  return absl::OkStatus();
}

absl::Status MakeDirectoryDurably(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0) {
    if (errno != EEXIST) return ErrnoError("cannot create directory", dir, errno);
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("'", dir, "' exists and is not a directory"));
    }
    return absl::OkStatus();
  }
  return FsyncDirectory(DirectoryOf(dir));
}

AtomicFile::AtomicFile(std::string path, std::string temp_path, UniqueFd fd)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(std::move(fd)) {}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(std::move(other.fd_)),
      committed_(other.committed_) {
  other.committed_ = true;  // the moved-from object owns nothing
}

absl::StatusOr<AtomicFile> AtomicFile::Create(const std::string& path) {
  std::string temp_path = absl::StrCat(path, ".tmp.XXXXXX");
  UniqueFd fd(::mkostemp(temp_path.data(), O_CLOEXEC));
  if (!fd.valid()) {
    return ErrnoError("cannot create a temporary file for", path, errno);
  }
  return AtomicFile(path, std::move(temp_path), std::move(fd));
}

AtomicFile::~AtomicFile() {
  if (!committed_) Abandon();
}

void AtomicFile::Abandon() {
  fd_.Close();
  ::unlink(temp_path_.c_str());
  committed_ = true;
}

absl::Status AtomicFile::Commit() {
  if (committed_) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path_, "' was already committed or abandoned"));
  }
  absl::Status status;
  if (::fsync(fd_.get()) != 0) status = ErrnoError("cannot fsync", path_, errno);
  if (status.ok() && ::fchmod(fd_.get(), 0644) != 0) {
    status = ErrnoError("cannot chmod", path_, errno);
  }
  if (fd_.Close() != 0 && status.ok()) {
    status = ErrnoError("cannot close", path_, errno);
  }
  if (status.ok() && ::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    status = ErrnoError(absl::StrCat("cannot rename ", temp_path_, " to"),
                        path_, errno);
  }
  if (!status.ok()) {
    Abandon();
    return status;
  }
  committed_ = true;
  return FsyncDirectory(DirectoryOf(path_));
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents) {
  ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(path));
  RETURN_IF_ERROR(WriteFully(file.fd(), contents, path));
  return file.Commit();
}

absl::StatusOr<OpenFile> OpenRegularFile(const std::string& path) {
  OpenFile file;
  file.fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file.fd.valid()) return ErrnoError("cannot open", path, errno);
  struct stat st;
  if (::fstat(file.fd.get(), &st) != 0) {
    return ErrnoError("cannot stat", path, errno);
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  file.size = st.st_size;
  return file;
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path,
                                          int64_t max_bytes) {
  ASSIGN_OR_RETURN(OpenFile file, OpenRegularFile(path));
  if (file.size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", file.size, " bytes, more than the limit of ",
                     max_bytes));
  }
  std::string contents(static_cast<size_t>(file.size), '\0');
  RETURN_IF_ERROR(PreadFully(file.fd.get(), contents.data(), file.size, 0, path));
  return contents;
}

}  // namespace pshard::checkpoint
