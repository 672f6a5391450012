// ChildProcess: one program started by `pshardctl local` (the coordinator or
// a worker) or by a multi-process test (tests/testing/subprocess.h wraps it),
// owned RAII-style. The child runs in its own process group (so a
// terminal's Ctrl-C reaches pshardctl alone, which then stops the children in
// order), with its output in a log file, and with PR_SET_PDEATHSIG so that it
// dies if pshardctl is killed before it can clean up.
#ifndef PSHARD_CLI_CHILD_PROCESS_H_
#define PSHARD_CLI_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace pshard::cli {

class ChildProcess {
 public:
  // Starts argv[0] (a path) with `argv`, stdin from /dev/null and stdout and
  // stderr appended to `log_path` (inherited when it is empty), with this
  // process's environment plus `extra_env` ("NAME=value"). `name` is used in
  // messages. Waits (WaitFor, Stop) are measured on `clock`.
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
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }

  // Reaps the child if it has exited, without blocking. True while it runs.
  bool Running();
  // The wait status once the child has been reaped.
  std::optional<int> wait_status() const { return wait_status_; }
  // "exited with code 3", "killed by signal 9", "running".
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
  ChildProcess(std::string name, pid_t pid, std::string log_path,
               const Clock& clock);

  std::string name_;
  pid_t pid_;
  std::string log_path_;
  std::optional<int> wait_status_;
  const Clock* clock_;
};

}  // namespace pshard::cli

#endif  // PSHARD_CLI_CHILD_PROCESS_H_
