#include "worker/runtime/program_log.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string TestDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string Contents(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ProgramLogPathTest, OneDirectoryPerJobWithUnsafeCharactersReplaced) {
  EXPECT_EQ(ProgramLogPath("/logs", "job-3", 1), "/logs/job-3/rank-1.log");
  EXPECT_EQ(ProgramLogPath("/logs", "../x/y", 0), "/logs/.._x_y/rank-0.log");
  EXPECT_EQ(ProgramLogPath("/logs", "..", 0), "/logs/_/rank-0.log");
}

TEST(ProgramLogTest, AppendsAndRotatesAtTheCapWithAMarker) {
  const std::string path = ProgramLogPath(TestDir(), "rotate", 0);
  ASSERT_OK_AND_ASSIGN(auto log, ProgramLog::Open(path, 1024));
  log->Append("first\n");
  EXPECT_EQ(Contents(path), "first\n");
  log->Append(std::string(2000, 'x'));
  // Full files hold exactly the cap; the newest output is in the live file.
  const std::string live = Contents(path);
  const std::string previous = Contents(path + ".1");
  EXPECT_EQ(previous.size(), 1024u);
  EXPECT_THAT(previous, StartsWith("[pshard: log reached 1024 bytes"));
  EXPECT_THAT(live, StartsWith("[pshard: log reached 1024 bytes"));
  EXPECT_LE(live.size(), 1024u);
  EXPECT_EQ(live.back(), 'x');
}

TEST(ProgramLogTest, ReopeningAppends) {
  const std::string path = ProgramLogPath(TestDir(), "reopen", 2);
  {
    ASSERT_OK_AND_ASSIGN(auto log, ProgramLog::Open(path, 4096));
    log->Append("epoch 1\n");
  }
  ASSERT_OK_AND_ASSIGN(auto log, ProgramLog::Open(path, 4096));
  log->Append("epoch 2\n");
  EXPECT_EQ(Contents(path), "epoch 1\nepoch 2\n");
}

TEST(ProgramLogTest, RejectsATinyCap) {
  EXPECT_THAT(ProgramLog::Open(ProgramLogPath(TestDir(), "tiny", 0), 10),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1024")));
}

}  // namespace
}  // namespace pshard::worker
