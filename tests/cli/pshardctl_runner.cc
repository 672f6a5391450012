#include "tests/cli/pshardctl_runner.h"

#include <sys/wait.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace pshard::testing {
namespace {

std::string Quote(const std::string& arg) {
  return absl::StrCat("'", absl::StrReplaceAll(arg, {{"'", "'\\''"}}), "'");
}

}  // namespace

CliResult RunPshardctl(const std::vector<std::string>& args,
                       const std::vector<std::string>& extra_env,
                       absl::Duration timeout,
                       const std::string& stdin_path) {
  return RunBinary("cli/pshardctl", args, extra_env, timeout, stdin_path);
}

CliResult RunBinary(const std::string& binary,
                    const std::vector<std::string>& args,
                    const std::vector<std::string>& extra_env,
                    absl::Duration timeout, const std::string& stdin_path) {
  const std::string dir = MakeTempDir("pshard-binary");
  std::vector<std::string> quoted;
  for (const std::string& a : args) quoted.push_back(Quote(a));
  // The shell only redirects; exec leaves pshardctl as the process waited on.
  const std::string command =
      absl::StrCat("exec ", Quote(RunfilePath(binary)), " ",
                   absl::StrJoin(quoted, " "), " >", dir, "/out 2>", dir,
                   "/err <",
                   Quote(stdin_path.empty() ? "/dev/null" : stdin_path));
  CliResult result;
  auto process = Subprocess::Start({"/bin/sh", "-c", command}, extra_env);
  EXPECT_OK(process.status());
  if (!process.ok()) return result;
  absl::StatusOr<int> status = (*process)->Wait(timeout);
  EXPECT_OK(status.status()) << binary << " " << absl::StrJoin(args, " ");
  if (status.ok() && WIFEXITED(*status)) result.exit_code = WEXITSTATUS(*status);
  result.out = ReadFile(dir + "/out");
  result.err = ReadFile(dir + "/err");
  return result;
}

}  // namespace pshard::testing
