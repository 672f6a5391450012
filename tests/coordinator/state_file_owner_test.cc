// One state file, one coordinator: a second pshard-coordinator started on
// the file of a running one exits at once, naming the first one's pid, and
// the first goes on serving; once the first is killed (-9), a new one opens
// the file.
#include <signal.h>
#include <sys/wait.h>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/helpers.h"

namespace pshard {
namespace coordinator_test {
namespace {

using ::testing::HasSubstr;

TEST(StateFileOwnerTest, ASecondCoordinatorOnTheSameFileExitsNamingTheFirst) {
  const std::string dir = testing::MakeTempDir("owner");
  ASSERT_OK_AND_ASSIGN(RunningCoordinator first, StartTestCoordinator(dir));
  auto jobs = v1::JobService::NewStub(first.Channel());
  ASSERT_OK_AND_ASSIGN(v1::Job job, SubmitJob(jobs.get(), "kept", 2, 10));

  const std::string log = dir + "/second.log";
  ASSERT_OK_AND_ASSIGN(
      auto second,
      testing::Subprocess::Start(
          {testing::RunfilePath("server/pshard-coordinator"),
           "--listen=127.0.0.1:0", "--insecure",
           "--state_path=" + dir + "/state.db"},
          {}, log));
  ASSERT_OK_AND_ASSIGN(int status, second->Wait(absl::Seconds(30)));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  EXPECT_THAT(testing::ReadFile(log),
              HasSubstr(absl::StrCat("in use by another coordinator (pid ",
                                     first.process->pid(), ",")));
  // The first never noticed.
  ASSERT_OK_AND_ASSIGN(v1::Job still, GetJob(jobs.get(), job.id()));
  EXPECT_EQ(still.state(), v1::QUEUED);

  // kill -9 frees the file for the next coordinator, which keeps the job.
  ASSERT_OK(first.process->Signal(SIGKILL));
  ASSERT_OK(first.process->Wait(absl::Seconds(10)).status());
  ASSERT_OK_AND_ASSIGN(RunningCoordinator next, StartTestCoordinator(dir));
  auto next_jobs = v1::JobService::NewStub(next.Channel());
  ASSERT_OK_AND_ASSIGN(v1::Job after, GetJob(next_jobs.get(), job.id()));
  EXPECT_EQ(after.spec().name(), "kept");
}

}  // namespace
}  // namespace coordinator_test
}  // namespace pshard
