#include "worker/drain_control.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace pshard::worker {
namespace {

constexpr char kPid[] = "pid";
constexpr char kDrain[] = "drain";
constexpr char kDrained[] = "drained";

std::string PathIn(const std::string& dir, const char* name) {
  return absl::StrCat(dir, "/", name);
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Writes `content` to `path` through a temporary file and a rename, so a
// reader never sees half of it.
absl::Status WriteAtomically(const std::string& path,
                             const std::string& content) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << content;
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string error = std::strerror(errno);
    std::remove(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", error));
  }
  return absl::OkStatus();
}

// The pid in `dir`/pid when that process is alive, else 0.
pid_t LiveWorker(const std::string& dir) {
  std::ifstream file(PathIn(dir, kPid));
  if (!file) return 0;
  std::stringstream buffer;
  buffer << file.rdbuf();
  pid_t pid = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(buffer.str()), &pid) ||
      pid <= 0) {
    return 0;
  }
  // EPERM: alive, but another user's (cannot happen in one container).
  return kill(pid, 0) == 0 || errno == EPERM ? pid : 0;
}

}  // namespace

absl::StatusOr<DrainControl> DrainControl::Open(std::string dir) {
  if (dir.empty()) {
    return absl::InvalidArgumentError("--control_dir: empty");
  }
  if (!IsDirectory(dir) && mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--control_dir: cannot create ", dir, ": ", std::strerror(errno)));
  }
  if (!IsDirectory(dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--control_dir: ", dir, " is not a directory"));
  }
  for (const char* stale : {kDrain, kDrained}) {
    const std::string path = PathIn(dir, stale);
    if (std::remove(path.c_str()) != 0 && errno != ENOENT) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--control_dir: cannot remove ", path, ": ", std::strerror(errno)));
    }
  }
  if (absl::Status written =
          WriteAtomically(PathIn(dir, kPid), absl::StrCat(getpid(), "\n"));
      !written.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--control_dir: ", written.message()));
  }
  return DrainControl(std::move(dir));
}

bool DrainControl::DrainRequested() const {
  return Exists(PathIn(dir_, kDrain));
}

absl::Status DrainControl::MarkDrained() const {
  return WriteAtomically(PathIn(dir_, kDrained), "drained\n");
}

absl::Status DrainAndWait(const std::string& dir, absl::Duration timeout,
                          const Clock& clock, absl::Duration poll) {
  if (!IsDirectory(dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--control_dir: ", dir, " is not a directory"));
  }
  std::vector<std::string> dirs;
  if (Exists(PathIn(dir, kPid))) {
    dirs.push_back(dir);
  } else {
    for (int i = 0; IsDirectory(absl::StrCat(dir, "/", i)); ++i) {
      dirs.push_back(absl::StrCat(dir, "/", i));
    }
  }
  // Only live workers are asked, and waited for.
  std::vector<std::string> draining;
  for (const std::string& d : dirs) {
    if (LiveWorker(d) == 0) continue;
    const std::string request = PathIn(d, kDrain);
    if (absl::Status asked = WriteAtomically(request, "drain\n"); !asked.ok()) {
      return asked;
    }
    draining.push_back(d);
  }
  const absl::Time deadline = clock.Now() + timeout;
  while (true) {
    std::vector<std::string> still;
    for (const std::string& d : draining) {
      if (!Exists(PathIn(d, kDrained)) && LiveWorker(d) != 0) {
        still.push_back(d);
      }
    }
    if (still.empty()) return absl::OkStatus();
    if (clock.Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the worker", still.size() > 1 ? "s" : "", " in ",
          absl::StrJoin(still, ", "), " did not drain within ",
          absl::FormatDuration(timeout),
          " (a job still running and no checkpoint since the drain began)"));
    }
    clock.SleepUntil(std::min(deadline, clock.Now() + poll));
  }
}

}  // namespace pshard::worker
