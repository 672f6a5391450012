// ChildProcess: one program started by `pshardctl local` (the coordinator or
// a worker), by a multi-process test (tests/testing/subprocess.h wraps it) or
// by a worker's agent for a program job (worker/runtime/program_job.h), owned
// RAII-style. The child runs in its own process group (so a terminal's Ctrl-C
// reaches the parent alone, which then stops the children in order, and a
// signal reaches everything the child started), with its output in a log
// file or a given descriptor, and with PR_SET_PDEATHSIG so that it dies if
// its parent is killed before it can clean up.
//
// PR_SET_PDEATHSIG covers the child only, not what it starts. With
// `reap_descendants` (what the agent uses for a user's program) the child is
// a small reaper forked from the parent (no exec) that starts the program as
// its own child and
//   - is a subreaper (PR_SET_CHILD_SUBREAPER): the program's orphans become
//     its children, not init's;
//   - when the program exits, SIGKILLs what is left of the program's process
//     group and exits with the program's status (same code, same signal);
//   - when the parent dies (its own PR_SET_PDEATHSIG), SIGKILLs the program's
//     whole process group first.
// So neither a program that leaves background processes behind nor a
// kill -9 of the parent leaves an orphan (a descendant that moves itself to
// another session with setsid is out of reach, as for any process group).
//
// PR_SET_PDEATHSIG fires when the parent *thread* that called Start exits:
// call Start on a thread that outlives the child.
#ifndef PSHARD_COMMON_CHILD_PROCESS_H_
#define PSHARD_COMMON_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace pshard {

class ChildProcess {
 public:
  struct Options {
    // Used in messages.
    std::string name;
    // argv[0] is a path, or (with `search_path`) a name looked up in PATH.
    std::vector<std::string> argv;
    bool search_path = false;
    // stdout and stderr: appended to `log_path` when it is non-empty, else
    // onto `output_fd` when it is >= 0 (e.g. a pipe's write end; the caller
    // keeps and closes its own copy), else inherited.
    std::string log_path;
    int output_fd = -1;
    // This process's environment plus these ("NAME=value"); a name given
    // here replaces the inherited one.
    std::vector<std::string> extra_env;
    // The child's working directory; empty: this process's.
    std::string working_dir;
    // See the header comment.
    bool reap_descendants = false;
    // Waits (WaitFor, Stop) are measured on it. Must outlive the child.
    const Clock* clock = &Clock::Real();
  };

  // Starts the child; stdin is /dev/null. NotFound names argv[0] when it is
  // not an executable file (or not found in PATH), and the working
  // directory when it is not one; InvalidArgument for an empty argv;
  // Internal when fork or a log file fails.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(Options options);

  // The same with the common options: argv[0] a path, output to `log_path`.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(
      std::string name, const std::vector<std::string>& argv,
      const std::string& log_path,
      const std::vector<std::string>& extra_env = {},
      const Clock& clock = Clock::Real());

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Kills (SIGKILL to the process group) and reaps a child still running.
  ~ChildProcess();

  const std::string& name() const { return name_; }
  // The process this object waits for (with reap_descendants, the reaper).
  pid_t pid() const { return pid_; }
  // The process group signals go to: the program's (its pid).
  pid_t process_group() const { return pgid_; }
  const std::string& log_path() const { return log_path_; }

  // Reaps the child if it has exited, without blocking. True while it runs.
  bool Running();
  // The wait status once the child has been reaped.
  std::optional<int> wait_status() const { return wait_status_; }
  // "exited with code 3", "killed by signal 9 (Killed)", "running".
  std::string DescribeExit() const;

  // Sends `signal` to the child's process group (the child and anything it
  // started). No-op once reaped.
  void Signal(int signal);

  // Waits up to `timeout` for the child to exit, reaping it. True if it did.
  bool WaitFor(absl::Duration timeout);

  // SIGTERM, wait up to `grace`, then SIGKILL and reap. Returns
  // DeadlineExceeded if SIGKILL was needed (the child is gone either way).
  absl::Status Stop(absl::Duration grace);

  // The last `max_lines` lines of the log file (for error reports).
  std::string LogTail(int max_lines) const;

 private:
  ChildProcess(std::string name, pid_t pid, pid_t pgid, std::string log_path,
               const Clock& clock);

  std::string name_;
  pid_t pid_;
  pid_t pgid_;
  std::string log_path_;
  std::optional<int> wait_status_;
  const Clock* clock_;
};

}  // namespace pshard

#endif  // PSHARD_COMMON_CHILD_PROCESS_H_
