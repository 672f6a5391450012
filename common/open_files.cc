#include "common/open_files.h"

#include <dirent.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace pshard {
namespace {

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

std::string LimitText(rlim_t limit) {
  return limit == RLIM_INFINITY ? "unlimited" : absl::StrCat(limit);
}

}  // namespace

absl::StatusOr<OpenFileLimit> GetOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return ErrnoError("getrlimit(RLIMIT_NOFILE)");
  }
  return OpenFileLimit{limit.rlim_cur, limit.rlim_max};
}

absl::StatusOr<OpenFileLimit> RaiseOpenFileLimit() {
  ASSIGN_OR_RETURN(const OpenFileLimit limit, GetOpenFileLimit());
  if (limit.soft == limit.hard) return limit;
  const rlimit raised{limit.hard, limit.hard};
  if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    return ErrnoError(
        absl::StrCat("setrlimit(RLIMIT_NOFILE) to ", LimitText(limit.hard)));
  }
  return OpenFileLimit{limit.hard, limit.hard};
}

void RaiseOpenFileLimitAtStart() {
  absl::StatusOr<OpenFileLimit> limit = RaiseOpenFileLimit();
  if (limit.ok()) {
    LOG(INFO) << "open files: limit " << LimitText(limit->soft);
  } else {
    LOG(WARNING) << "open files: " << limit.status();
  }
}

absl::StatusOr<int64_t> CountOpenFiles() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return ErrnoError("opendir(/proc/self/fd)");
  int64_t count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // the directory's own descriptor
}

absl::Status CheckOpenFileHeadroom(int64_t needed, absl::string_view what) {
  absl::StatusOr<OpenFileLimit> limit = GetOpenFileLimit();
  if (!limit.ok()) return limit.status();
  if (limit->soft == RLIM_INFINITY) return absl::OkStatus();
  absl::StatusOr<int64_t> open = CountOpenFiles();
  if (!open.ok()) return open.status();
  const int64_t free = static_cast<int64_t>(limit->soft) - *open;
  if (needed <= free) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      what, " needs ", needed, " more open files, but only ", free,
      " fit under this process's limit of ", limit->soft, " (", *open,
      " open; hard limit ", LimitText(limit->hard),
      "): raise the nofile limit (ulimit -n, or the container runtime's)"));
}

}  // namespace pshard
