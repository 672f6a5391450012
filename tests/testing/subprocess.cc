#include "tests/testing/subprocess.h"

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/port_file.h"

namespace pshard::testing {

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const std::vector<std::string>& argv,
    const std::vector<std::string>& extra_env, const std::string& log_path) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Start(argv.empty() ? "" : argv[0], argv, log_path,
                               extra_env);
  if (!child.ok()) return child.status();
  return std::unique_ptr<Subprocess>(new Subprocess(*std::move(child)));
}

Subprocess::~Subprocess() = default;

absl::Status Subprocess::Signal(int signal) {
  if (Poll()) {
    return absl::FailedPreconditionError(
        absl::StrCat("process ", pid(), " has already exited"));
  }
  child_->Signal(signal);
  return absl::OkStatus();
}

bool Subprocess::Poll() { return !child_->Running(); }

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  if (!child_->WaitFor(timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "process ", pid(), " still running after ", absl::FormatDuration(timeout)));
  }
  return *child_->wait_status();
}

absl::StatusOr<int> WaitForPortFile(const std::string& path,
                                    absl::Duration timeout) {
  absl::StatusOr<int> port;
  if (!WaitUntil([&] { return (port = ReadPortFile(path)).ok(); }, timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "no port in ", path, " after ", absl::FormatDuration(timeout), ": ",
        port.status().message()));
  }
  return port;
}

std::string RunfilePath(absl::string_view workspace_relative_path) {
  if (const char* srcdir = getenv("TEST_SRCDIR")) {
    const char* workspace = getenv("TEST_WORKSPACE");
    return absl::StrCat(srcdir, "/", workspace ? workspace : "pshard", "/",
                        workspace_relative_path);
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return std::string(workspace_relative_path);
  self[n] = '\0';
  return absl::StrCat(self, ".runfiles/pshard/", workspace_relative_path);
}

bool ProcessAlive(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string id, comm, state;
  if (!(stat >> id >> comm >> state)) return false;
  return state != "Z";
}

std::string MakeTempDir(absl::string_view prefix) {
  const char* base = getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(base ? base : "/tmp", "/", prefix, "XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) return "";
  return pattern;
}

std::string WriteTempFile(absl::string_view name, absl::string_view content) {
  const std::string path = absl::StrCat(MakeTempDir("file"), "/", name);
  std::ofstream(path) << content;
  return path;
}

std::vector<std::string> ListDirectory(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (condition()) return true;
    if (absl::Now() >= deadline) return false;
    // Polling interval of a wait with a deadline, not a synchronisation sleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace pshard::testing
