#include "common/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

extern char** environ;

namespace pshard {
namespace {

absl::string_view EnvName(absl::string_view entry) {
  return entry.substr(0, entry.find('='));
}

// The child's environment: ours, less the names `extra` sets, then `extra`.
std::vector<std::string> ChildEnvironment(const std::vector<std::string>& extra) {
  absl::flat_hash_set<absl::string_view> replaced;
  for (const std::string& e : extra) replaced.insert(EnvName(e));
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!replaced.contains(EnvName(*e))) env.emplace_back(*e);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

// argv[0] as execve needs it: a path as given, or a bare name looked up in
// the child's PATH (as execvp would, but before fork, so that a missing
// program is an error here rather than an exit status 127).
absl::StatusOr<std::string> ResolveExecutable(
    const ChildProcess::Options& options, const std::vector<std::string>& env) {
  const std::string& program = options.argv[0];
  if (!options.search_path || program.find('/') != std::string::npos) {
    if (IsExecutableFile(program)) return program;
    return absl::NotFoundError(
        absl::StrCat("starting ", options.name, ": ", program,
                     " is not an executable file: ",
                     access(program.c_str(), F_OK) != 0 ? std::strerror(errno)
                                                       : "no permission"));
  }
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const std::string& e : env) {
    if (EnvName(e) == "PATH") path = e.substr(5);
  }
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    const std::string candidate =
        absl::StrCat(dir.empty() ? "." : dir, "/", program);
    if (IsExecutableFile(candidate)) return candidate;
  }
  return absl::NotFoundError(absl::StrCat("starting ", options.name, ": ",
                                          program, ": not found in PATH (",
                                          path, ")"));
}

void WriteStderr(const char* message) {
  ssize_t ignored = write(STDERR_FILENO, message, std::strlen(message));
  (void)ignored;
}

// In the forked child (async-signal-safe calls only: the parent has
// threads): default signal handling, stdio, working directory, exec.
[[noreturn]] void ExecChild(char* const* argv, char* const* envp, int null_fd,
                            int out_fd, const char* working_dir) {
  // The parent may block SIGINT/SIGTERM for a signal thread; the mask and
  // dispositions survive exec, so restore the defaults.
  // Dispositions first, then the mask: a signal that arrived while blocked
  // (e.g. SIGTERM right after Start) is delivered now, with its default.
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  signal(SIGCHLD, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, nullptr);
  if (null_fd != STDIN_FILENO) dup2(null_fd, STDIN_FILENO);
  if (out_fd >= 0) {
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
  }
  if (working_dir != nullptr && chdir(working_dir) != 0) {
    WriteStderr("pshard: cannot change to the working directory\n");
    _exit(127);
  }
  execve(argv[0], argv, envp);
  WriteStderr("pshard: exec failed\n");
  _exit(127);
}

// The reaper of reap_descendants (header comment), in the forked child:
// async-signal-safe calls only. Writes the program's pid to `report_fd`.
[[noreturn]] void RunReaper(pid_t parent, char* const* argv, char* const* envp,
                            int null_fd, int out_fd, const char* working_dir,
                            int report_fd) {
  // SIGCHLD and SIGUSR1 (the parent's death) are taken by sigwaitinfo.
  sigset_t waited;
  sigemptyset(&waited);
  sigaddset(&waited, SIGCHLD);
  sigaddset(&waited, SIGUSR1);
  // Terminal signals are for the program's group, not the reaper's; they
  // are blocked rather than ignored so that the program, which inherits
  // the mask until it execs, keeps one sent to it early.
  sigset_t blocked = waited;
  sigaddset(&blocked, SIGINT);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGHUP);
  sigprocmask(SIG_BLOCK, &blocked, nullptr);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  prctl(PR_SET_PDEATHSIG, SIGUSR1);
  if (getppid() != parent) _exit(127);  // the parent died before prctl
  // No exec here, so close-on-exec does not apply: keep only our stdio
  // (which the program inherits) and the report pipe, or the reaper would
  // hold the parent's sockets and files open for the program's lifetime.
  dup2(null_fd, STDIN_FILENO);
  if (out_fd >= 0) {
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
  }
  dup2(report_fd, 3);
  report_fd = 3;
  close_range(4, ~0U, 0);
  const pid_t reaper = getpid();
  const pid_t program = fork();
  if (program < 0) _exit(127);
  if (program == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != reaper) _exit(127);
    close(report_fd);
    ExecChild(argv, envp, STDIN_FILENO, -1, working_dir);
  }
  setpgid(program, program);
  ssize_t ignored = write(report_fd, &program, sizeof(program));
  (void)ignored;
  close(report_fd);
  int program_status = 0;
  bool program_done = false;
  while (!program_done) {
    siginfo_t info;
    const int sig = sigwaitinfo(&waited, &info);
    if (sig == SIGUSR1) kill(-program, SIGKILL);  // the parent is gone
    int status = 0;
    pid_t reaped;
    while ((reaped = waitpid(-1, &status, WNOHANG)) > 0) {
      if (reaped == program) {
        program_status = status;
        program_done = true;
      }
    }
    if (reaped < 0 && errno == ECHILD && !program_done) _exit(127);
  }
  // What the program left in its group goes with it; reparented orphans
  // already dead are reaped, the rest are init's once we exit.
  kill(-program, SIGKILL);
  int status = 0;
  while (waitpid(-1, &status, WNOHANG) > 0) {
  }
  if (WIFSIGNALED(program_status)) {
    // Die the same way, without a core file of our own.
    const int sig = WTERMSIG(program_status);
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(sig, SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, sig);
    sigprocmask(SIG_UNBLOCK, &only, nullptr);
    kill(reaper, sig);
    _exit(128 + sig);
  }
  _exit(WIFEXITED(program_status) ? WEXITSTATUS(program_status) : 127);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    std::string name, const std::vector<std::string>& argv,
    const std::string& log_path, const std::vector<std::string>& extra_env,
    const Clock& clock) {
  Options options;
  options.name = std::move(name);
  options.argv = argv;
  options.log_path = log_path;
  options.extra_env = extra_env;
  options.clock = &clock;
  return Start(std::move(options));
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    Options options) {
  const std::string& name = options.name;
  if (options.argv.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("starting ", name, ": empty command line"));
  }
  std::vector<std::string> env_strings = ChildEnvironment(options.extra_env);
  absl::StatusOr<std::string> executable =
      ResolveExecutable(options, env_strings);
  if (!executable.ok()) return executable.status();
  if (!options.working_dir.empty()) {
    struct stat st;
    if (stat(options.working_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::NotFoundError(absl::StrCat("starting ", name,
                                              ": working directory ",
                                              options.working_dir,
                                              " is not a directory"));
    }
  }
  int log_fd = -1;
  if (!options.log_path.empty()) {
    log_fd = open(options.log_path.c_str(),
                  O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return absl::InternalError(absl::StrCat("starting ", name,
                                              ": cannot open log ",
                                              options.log_path, ": ",
                                              std::strerror(errno)));
    }
  }
  const int out_fd = log_fd >= 0 ? log_fd : options.output_fd;
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int report[2] = {-1, -1};
  if (null_fd < 0 ||
      (options.reap_descendants && pipe2(report, O_CLOEXEC) != 0)) {
    const int err = errno;
    if (log_fd >= 0) close(log_fd);
    if (null_fd >= 0) close(null_fd);
    return absl::InternalError(absl::StrCat("starting ", name, ": ",
                                            std::strerror(err)));
  }
  // Everything the child needs is prepared before fork: after it, only
  // async-signal-safe calls are allowed (the parent has threads).
  std::vector<char*> cargv;
  cargv.reserve(options.argv.size() + 1);
  cargv.push_back(executable->data());
  for (size_t i = 1; i < options.argv.size(); ++i) {
    cargv.push_back(options.argv[i].data());
  }
  cargv.push_back(nullptr);
  std::vector<char*> cenv;
  cenv.reserve(env_strings.size() + 1);
  for (std::string& e : env_strings) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  const char* working_dir =
      options.working_dir.empty() ? nullptr : options.working_dir.c_str();
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    if (log_fd >= 0) close(log_fd);
    close(null_fd);
    if (report[0] >= 0) {
      close(report[0]);
      close(report[1]);
    }
    return absl::InternalError(
        absl::StrCat("starting ", name, ": fork: ", std::strerror(err)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    if (options.reap_descendants) {
      close(report[0]);
      RunReaper(parent, cargv.data(), cenv.data(), null_fd, out_fd,
                working_dir, report[1]);
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The parent may have died between fork and prctl.
    if (getppid() != parent) _exit(127);
    ExecChild(cargv.data(), cenv.data(), null_fd, out_fd, working_dir);
  }
  // Also set the group from the parent, so that it holds before we return
  // whichever process runs first.
  setpgid(pid, pid);
  if (log_fd >= 0) close(log_fd);
  close(null_fd);
  pid_t pgid = pid;
  if (options.reap_descendants) {
    close(report[1]);
    pid_t program = 0;
    ssize_t n;
    while ((n = read(report[0], &program, sizeof(program))) < 0 &&
           errno == EINTR) {
    }
    close(report[0]);
    if (n != sizeof(program) || program <= 0) {
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return absl::InternalError(
          absl::StrCat("starting ", name, ": the reaper process failed"));
    }
    // The program sets its group itself and the reaper does too; make sure
    // before anyone signals it.
    setpgid(program, program);
    pgid = program;
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(
      std::move(options.name), pid, pgid, options.log_path, *options.clock));
}

ChildProcess::ChildProcess(std::string name, pid_t pid, pid_t pgid,
                           std::string log_path, const Clock& clock)
    : name_(std::move(name)),
      pid_(pid),
      pgid_(pgid),
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
  // The program's group has its pid as id; kill the group so that anything
  // it started goes too. Fall back to the pid if the group is gone.
  if (kill(-pgid_, signal) != 0) kill(pgid_, signal);
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

}  // namespace pshard
