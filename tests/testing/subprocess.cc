#include "tests/testing/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/port_file.h"

extern char** environ;

namespace pshard::testing {
namespace {

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const std::vector<std::string>& argv,
    const std::vector<std::string>& extra_env, const std::string& log_path) {
  if (argv.empty()) return absl::InvalidArgumentError("argv is empty");
  if (access(argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("not an executable: ", argv[0], ": ", std::strerror(errno)));
  }
  // Everything the child needs is prepared before fork(): after it, only
  // async-signal-safe calls are allowed.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  for (const std::string& e : extra_env) env_strings.push_back(e);
  std::vector<char*> env;
  for (std::string& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);
  int log_fd = -1;
  if (!log_path.empty()) {
    log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                  0644);
    if (log_fd < 0) return ErrnoError(absl::StrCat("open ", log_path));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    if (log_fd >= 0) close(log_fd);
    return ErrnoError("fork");
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    if (log_fd >= 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
    }
    execve(args[0], args.data(), env.data());
    _exit(127);
  }
  if (log_fd >= 0) close(log_fd);
  return std::unique_ptr<Subprocess>(new Subprocess(pid));
}

Subprocess::~Subprocess() {
  if (exited_) return;
  kill(-pid_, SIGKILL);
  kill(pid_, SIGKILL);
  waitpid(pid_, &wait_status_, 0);
}

absl::Status Subprocess::Signal(int signal) {
  if (Poll()) {
    return absl::FailedPreconditionError(
        absl::StrCat("process ", pid_, " has already exited"));
  }
  if (kill(pid_, signal) != 0) return ErrnoError(absl::StrCat("kill ", pid_));
  return absl::OkStatus();
}

bool Subprocess::Poll() {
  if (exited_) return true;
  const pid_t r = waitpid(pid_, &wait_status_, WNOHANG);
  if (r == pid_) exited_ = true;
  return exited_;
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  if (!WaitUntil([this] { return Poll(); }, timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "process ", pid_, " still running after ", absl::FormatDuration(timeout)));
  }
  return wait_status_;
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

std::string MakeTempDir(absl::string_view prefix) {
  const char* base = getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(base ? base : "/tmp", "/", prefix, "XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) return "";
  return pattern;
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
