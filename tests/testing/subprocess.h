// Helpers for multi-process tests: start the project's real binaries on
// loopback, wait for them to be ready, and never leave one behind.
//
//   ASSERT_OK_AND_ASSIGN(auto coordinator, Subprocess::Start(
//       {RunfilePath("server/pshard-coordinator"), "--listen=127.0.0.1:0",
//        "--port_file=" + port_file}));
//   ASSERT_OK_AND_ASSIGN(int port, WaitForPortFile(port_file, absl::Seconds(30)));
#ifndef PSHARD_TESTS_TESTING_SUBPROCESS_H_
#define PSHARD_TESTS_TESTING_SUBPROCESS_H_

#include <sys/types.h>

#include <utility>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/child_process.h"

namespace pshard::testing {

// A child process, as tests want it (Status-returning Signal and Wait). The
// process handling itself is common/'s ChildProcess: its own process
// group, PR_SET_PDEATHSIG, and SIGKILL to the group plus reaping in the
// destructor, so a failing test leaves no process behind.
class Subprocess {
 public:
  // Starts argv[0] (a path) with arguments argv[1..], in its own process
  // group, with the parent's environment plus `extra_env` ("NAME=value").
  // stdout and stderr go to `log_path` when it is non-empty (appended), else
  // they are inherited. The child also gets SIGKILL if the test process dies.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      const std::vector<std::string>& argv,
      const std::vector<std::string>& extra_env = {},
      const std::string& log_path = "");

  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();

  pid_t pid() const { return child_->pid(); }
  bool running() const { return !child_->wait_status().has_value(); }

  // Sends `signal` to the process (and its group). FailedPrecondition if it
  // already exited.
  absl::Status Signal(int signal);

  // Waits up to `timeout` for the process to exit and returns its wait
  // status (use WIFEXITED/WEXITSTATUS/WIFSIGNALED). DeadlineExceeded if it is
  // still running.
  absl::StatusOr<int> Wait(absl::Duration timeout);

  // Non-blocking: true (and records the wait status) if the process exited.
  bool Poll();

 private:
  explicit Subprocess(std::unique_ptr<ChildProcess> child)
      : child_(std::move(child)) {}

  std::unique_ptr<ChildProcess> child_;
};

// Polls `path` until it holds a port number (as written by --port_file) or
// `timeout` passes.
absl::StatusOr<int> WaitForPortFile(const std::string& path,
                                    absl::Duration timeout);

// Absolute path of a runfile of this workspace, e.g.
// RunfilePath("server/pshard-coordinator"). Uses $TEST_SRCDIR under
// `bazel test`, else the runfiles tree next to the running binary.
std::string RunfilePath(absl::string_view workspace_relative_path);

// True while process `pid` exists and is not a zombie (for checking that a
// program left no child behind).
bool ProcessAlive(pid_t pid);

// A fresh directory under $TEST_TMPDIR (or /tmp) for one test's files.
std::string MakeTempDir(absl::string_view prefix);

// Writes `content` to a new file named `name` in a fresh temp dir; returns
// its path.
std::string WriteTempFile(absl::string_view name, absl::string_view content);

// The names in directory `dir` (without "." and ".."), sorted; empty if it
// cannot be read.
std::vector<std::string> ListDirectory(const std::string& dir);

// The whole file; empty if it cannot be read (tests show it in messages).
std::string ReadFile(const std::string& path);

// Polls `condition` every few milliseconds until it is true or `timeout`
// passes; returns whether it became true. For waiting on another process's
// observable state, never as a sleep.
bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout);

}  // namespace pshard::testing

#endif  // PSHARD_TESTS_TESTING_SUBPROCESS_H_
