#include "cli/child_process.h"

#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/fake_clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::cli {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

TEST(ChildProcessTest, RunsWithOutputInTheLog) {
  const std::string log = TempPath("echo.log");
  ASSERT_OK_AND_ASSIGN(
      auto child, ChildProcess::Start("echo", {"/bin/sh", "-c", "echo hello; exit 3"},
                                      log));
  ASSERT_TRUE(child->WaitFor(absl::Seconds(10)));
  EXPECT_FALSE(child->Running());
  EXPECT_EQ(child->DescribeExit(), "exited with code 3");
  EXPECT_EQ(child->LogTail(5), "hello");
}

TEST(ChildProcessTest, MissingProgramIsNotFound) {
  EXPECT_THAT(ChildProcess::Start("x", {"/nonexistent/prog"}, TempPath("x.log")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/prog")));
}

TEST(ChildProcessTest, StopUsesSigtermFirst) {
  ASSERT_OK_AND_ASSIGN(
      auto child,
      ChildProcess::Start("sleeper", {"/bin/sleep", "60"}, TempPath("s.log")));
  EXPECT_TRUE(child->Running());
  EXPECT_OK(child->Stop(absl::Seconds(10)));
  EXPECT_THAT(child->DescribeExit(), HasSubstr("signal 15"));
  EXPECT_FALSE(Alive(child->pid()));
}

TEST(ChildProcessTest, StopKillsWhatIgnoresSigtermAndItsChildren) {
  // The shell ignores SIGTERM and starts a grandchild; both must go.
  const std::string pid_file = TempPath("grandchild.pid");
  std::remove(pid_file.c_str());
  ASSERT_OK_AND_ASSIGN(
      auto child,
      ChildProcess::Start(
          "stubborn",
          {"/bin/sh", "-c",
           absl::StrCat("trap '' TERM; sleep 60 & echo $! > ", pid_file,
                        ".tmp; mv ", pid_file, ".tmp ", pid_file, "; wait")},
          TempPath("stubborn.log")));
  pid_t grandchild = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (grandchild == 0 && absl::Now() < deadline) {
    std::ifstream in(pid_file);
    if (!(in >> grandchild)) {
      grandchild = 0;
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  ASSERT_GT(grandchild, 0);
  const absl::Status status = child->Stop(absl::Milliseconds(300));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded,
                               HasSubstr("stubborn")));
  EXPECT_FALSE(child->Running());
  // The grandchild was in the child's process group; it is reaped by init
  // (or is a zombie until then), so wait for it to vanish or turn Z.
  const absl::Time gone_by = absl::Now() + absl::Seconds(10);
  bool gone = false;
  while (!gone && absl::Now() < gone_by) {
    std::ifstream stat(absl::StrCat("/proc/", grandchild, "/stat"));
    std::string pid, comm, state;
    gone = !(stat >> pid >> comm >> state) || state == "Z";
    if (!gone) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(gone) << "grandchild " << grandchild << " survived";
}

// WaitFor and Stop measure their grace on the injected clock: here time
// jumps past every poll, so a child that ignores SIGTERM is killed without
// the test waiting out the grace.
TEST(ChildProcessTest, GraceIsMeasuredOnTheInjectedClock) {
  FakeClock clock;
  clock.set_advance_on_sleep(true);
  ASSERT_OK_AND_ASSIGN(
      auto child,
      ChildProcess::Start("deaf", {"/bin/sh", "-c", "trap '' TERM; sleep 60"},
                          TempPath("deaf.log"), {}, clock));
  const absl::Time start = clock.Now();
  EXPECT_FALSE(child->WaitFor(absl::Hours(1)));
  EXPECT_GE(clock.Now() - start, absl::Hours(1));
  EXPECT_THAT(child->Stop(absl::Hours(1)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("within 1h of SIGTERM; killed")));
}

TEST(ChildProcessTest, DestructorKillsAndReaps) {
  pid_t pid = 0;
  {
    ASSERT_OK_AND_ASSIGN(
        auto child,
        ChildProcess::Start("sleeper", {"/bin/sleep", "60"}, TempPath("d.log")));
    pid = child->pid();
  }
  EXPECT_FALSE(Alive(pid));
}

}  // namespace
}  // namespace pshard::cli
