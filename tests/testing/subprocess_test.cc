#include "tests/testing/subprocess.h"

#include <signal.h>
#include <sys/wait.h>

#include <fstream>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace pshard::testing {
namespace {

using ::testing::HasSubstr;

TEST(SubprocessTest, ReportsExitCode) {
  ASSERT_OK_AND_ASSIGN(auto child, Subprocess::Start({"/bin/sh", "-c", "exit 3"}));
  ASSERT_OK_AND_ASSIGN(int status, child->Wait(absl::Seconds(10)));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
}

TEST(SubprocessTest, PassesEnvironmentAndLogsOutput) {
  const std::string dir = MakeTempDir("subprocess_test");
  const std::string log = dir + "/out.log";
  ASSERT_OK_AND_ASSIGN(auto child,
                       Subprocess::Start({"/bin/sh", "-c", "echo value=$PSHARD_X"},
                                         {"PSHARD_X=42"}, log));
  ASSERT_OK(child->Wait(absl::Seconds(10)).status());
  std::ifstream in(log);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "value=42");
}

TEST(SubprocessTest, WaitTimesOutOnRunningProcessAndSignalStopsIt) {
  ASSERT_OK_AND_ASSIGN(auto child, Subprocess::Start({"/bin/sleep", "60"}));
  EXPECT_THAT(child->Wait(absl::Milliseconds(50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("still running")));
  ASSERT_OK(child->Signal(SIGTERM));
  ASSERT_OK_AND_ASSIGN(int status, child->Wait(absl::Seconds(10)));
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_THAT(child->Signal(SIGTERM),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("exited")));
}

TEST(SubprocessTest, DestructorKillsRunningProcess) {
  pid_t pid;
  {
    ASSERT_OK_AND_ASSIGN(auto child, Subprocess::Start({"/bin/sleep", "60"}));
    pid = child->pid();
  }
  EXPECT_NE(kill(pid, 0), 0) << "process " << pid << " survived its Subprocess";
}

TEST(SubprocessTest, MissingBinaryIsNotFound) {
  EXPECT_THAT(Subprocess::Start({"/nonexistent/binary"}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/binary")));
}

TEST(SubprocessTest, WaitForPortFileReadsPortOrTimesOut) {
  const std::string dir = MakeTempDir("port_file_test");
  EXPECT_THAT(WaitForPortFile(dir + "/missing", absl::Milliseconds(30)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("missing")));
  std::ofstream(dir + "/port") << "4242\n";
  EXPECT_THAT(WaitForPortFile(dir + "/port", absl::Seconds(1)), IsOk());
  EXPECT_EQ(*WaitForPortFile(dir + "/port", absl::Seconds(1)), 4242);
}

}  // namespace
}  // namespace pshard::testing
