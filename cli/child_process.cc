#include "cli/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

extern char** environ;

namespace pshard::cli {

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    std::string name, const std::vector<std::string>& argv,
    const std::string& log_path, const std::vector<std::string>& extra_env,
    const Clock& clock) {
  if (argv.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("starting ", name, ": empty command line"));
  }
  if (access(argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("starting ", name, ": ", argv[0],
                                            " is not executable: ",
                                            std::strerror(errno)));
  }
  int log_fd = -1;
  if (!log_path.empty()) {
    log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                  0644);
    if (log_fd < 0) {
      return absl::InternalError(absl::StrCat("starting ", name,
                                              ": cannot open log ", log_path,
                                              ": ", std::strerror(errno)));
    }
  }
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    if (log_fd >= 0) close(log_fd);
    return absl::InternalError(
        absl::StrCat("cannot open /dev/null: ", std::strerror(errno)));
  }
  // Everything the child needs is prepared before fork: after it, only
  // async-signal-safe calls are allowed (the parent has threads).
  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (const std::string& arg : argv) cargv.push_back(const_cast<char*>(arg.c_str()));
  cargv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> cenv;
  cenv.reserve(env_strings.size() + 1);
  for (std::string& e : env_strings) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    if (log_fd >= 0) close(log_fd);
    close(null_fd);
    return absl::InternalError(
        absl::StrCat("starting ", name, ": fork: ", std::strerror(err)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The parent may have died between fork and prctl.
    if (getppid() != parent) _exit(127);
    // pshardctl blocks SIGINT/SIGTERM for its signal thread; the mask and
    // dispositions survive exec, so restore the defaults.
    sigset_t empty;
    sigemptyset(&empty);
    sigprocmask(SIG_SETMASK, &empty, nullptr);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    dup2(null_fd, STDIN_FILENO);
    if (log_fd >= 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
    }
    execve(cargv[0], cargv.data(), cenv.data());
    static const char kMsg[] = "pshardctl: exec failed\n";
    ssize_t ignored = write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
    (void)ignored;
    _exit(127);
  }
  // Also set the group from the parent, so that it holds before we return
  // whichever process runs first.
  setpgid(pid, pid);
  if (log_fd >= 0) close(log_fd);
  close(null_fd);
  return std::unique_ptr<ChildProcess>(
      new ChildProcess(std::move(name), pid, log_path, clock));
}

ChildProcess::ChildProcess(std::string name, pid_t pid, std::string log_path,
                           const Clock& clock)
    : name_(std::move(name)),
      pid_(pid),
      log_path_(std::move(log_path)),
      clock_(&clock) {}

ChildProcess::~ChildProcess() {
  if (!wait_status_.has_value()) {
    Signal(SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

bool ChildProcess::Running() {
  if (wait_status_.has_value()) return false;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    wait_status_ = status;
    return false;
  }
  if (r < 0 && errno == ECHILD) {
    // Reaped elsewhere; treat as gone.
    wait_status_ = 0;
    return false;
  }
  return true;
}

std::string ChildProcess::DescribeExit() const {
  if (!wait_status_.has_value()) return "running";
  const int s = *wait_status_;
  if (WIFEXITED(s)) return absl::StrCat("exited with code ", WEXITSTATUS(s));
  if (WIFSIGNALED(s)) {
    return absl::StrCat("killed by signal ", WTERMSIG(s), " (",
                        strsignal(WTERMSIG(s)), ")");
  }
  return absl::StrCat("ended with wait status ", s);
}

void ChildProcess::Signal(int signal) {
  if (wait_status_.has_value()) return;
  // The child's group has its pid as id; kill the group so that anything the
  // child started goes too. Fall back to the pid if the group is gone.
  if (kill(-pid_, signal) != 0) kill(pid_, signal);
}

bool ChildProcess::WaitFor(absl::Duration timeout) {
  const absl::Time deadline = clock_->Now() + timeout;
  while (Running()) {
    if (clock_->Now() >= deadline) return false;
    // waitpid has no timeout: poll.
    clock_->SleepFor(absl::Milliseconds(10));
  }
  return true;
}

absl::Status ChildProcess::Stop(absl::Duration grace) {
  if (!Running()) return absl::OkStatus();
  Signal(SIGTERM);
  if (WaitFor(grace)) return absl::OkStatus();
  Signal(SIGKILL);
  WaitFor(absl::Seconds(10));
  return absl::DeadlineExceededError(
      absl::StrCat(name_, " (pid ", pid_, ") did not exit within ",
                   absl::FormatDuration(grace), " of SIGTERM; killed"));
}

std::string ChildProcess::LogTail(int max_lines) const {
  std::ifstream file(log_path_);
  if (!file) return "";
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(file, line)) {
    lines.push_back(std::move(line));
    if (static_cast<int>(lines.size()) > max_lines) lines.pop_front();
  }
  return absl::StrJoin(lines, "\n");
}

}  // namespace pshard::cli
