// Runs the pshardctl binary (from the test's runfiles) as a real process and
// captures its exit code, stdout and stderr separately: what a user or a
// script sees.
#ifndef PSHARD_TESTS_CLI_PSHARDCTL_RUNNER_H_
#define PSHARD_TESTS_CLI_PSHARDCTL_RUNNER_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace pshard::testing {

struct CliResult {
  // The exit code; -1 if it did not exit normally within the timeout (the
  // test has then already failed).
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `pshardctl args...` with the test's environment plus `extra_env`
// ("NAME=value"), waiting up to `timeout`; stdin is `stdin_path`, or empty.
CliResult RunPshardctl(const std::vector<std::string>& args,
                       const std::vector<std::string>& extra_env = {},
                       absl::Duration timeout = absl::Seconds(60),
                       const std::string& stdin_path = "");

// The same for any of the test's runfiles, e.g. "server/pshard-coordinator".
CliResult RunBinary(const std::string& binary,
                    const std::vector<std::string>& args,
                    const std::vector<std::string>& extra_env = {},
                    absl::Duration timeout = absl::Seconds(60),
                    const std::string& stdin_path = "");

}  // namespace pshard::testing

#endif  // PSHARD_TESTS_CLI_PSHARDCTL_RUNNER_H_
