#include "common/logging.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::SizeIs;

// What the process writes to stderr while it lives.
class StderrCapture {
 public:
  StderrCapture() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    path_ = std::string(tmp != nullptr ? tmp : "/tmp") + "/stderr_capture";
    std::fflush(stderr);
    saved_ = dup(STDERR_FILENO);
    const int fd = open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  ~StderrCapture() { Restore(); }

  // Restores stderr and returns what was written to it.
  std::string Take() {
    Restore();
    std::ifstream in(path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  void Restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, STDERR_FILENO);
    close(saved_);
    saved_ = -1;
  }

  std::string path_;
  int saved_ = -1;
};

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST(ParseLogLevelTest, NamesAndErrors) {
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("info"), LogLevel::kInfo);
  EXPECT_EQ(*ParseLogLevel("warning"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  EXPECT_THAT(ParseLogLevel("loud"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("debug, info, warning or error, got \"loud\"")));
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_THAT(ParseLogFormat("xml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("text or json, got \"xml\"")));
}

TEST(JsonLogLineTest, ShapeAndEscaping) {
  const absl::Time t = absl::FromUnixMicros(1796352601123456);  // 2026-12-04
  EXPECT_EQ(JsonLogLine(t, "info", "pshard-worker", "agent.cc", 42, "job j-1"),
            "{\"time\":\"2026-12-04T02:50:01.123456Z\",\"level\":\"info\","
            "\"program\":\"pshard-worker\",\"file\":\"agent.cc\",\"line\":42,"
            "\"msg\":\"job j-1\"}");
  EXPECT_THAT(
      JsonLogLine(t, "error", "p", "f.cc", 1,
                  std::string("say \"hi\"\\ \n\t\r\b\f\x01\x1f caf\xc3\xa9", 23)),
      HasSubstr("\"msg\":\"say \\\"hi\\\"\\\\ \\n\\t\\r\\b\\f\\u0001\\u001f "
                "caf\xc3\xa9\"}"));
}

TEST(InitLoggingTest, TextLinesFilteredByLevel) {
  StderrCapture capture;
  InitLogging("logging_test", LogLevel::kWarning, LogFormat::kText);
  LOG(INFO) << "an info line";
  VLOG(1) << "a debug line";
  LOG(WARNING) << "a warning line";
  LOG(ERROR) << "an error line";
  const std::string out = capture.Take();
  EXPECT_THAT(out, Not(HasSubstr("an info line")));
  EXPECT_THAT(out, Not(HasSubstr("a debug line")));
  EXPECT_THAT(out, HasSubstr("a warning line"));
  EXPECT_THAT(out, HasSubstr("an error line"));
  EXPECT_THAT(Lines(out), SizeIs(2)) << out;
}

TEST(InitLoggingTest, DebugShowsVlogOne) {
  StderrCapture capture;
  InitLogging("logging_test", LogLevel::kDebug, LogFormat::kText);
  VLOG(1) << "a debug line";
  VLOG(2) << "a finer line";
  LOG(INFO) << "an info line";
  InitLogging("logging_test", LogLevel::kInfo, LogFormat::kText);
  VLOG(1) << "a second debug line";
  const std::string out = capture.Take();
  EXPECT_THAT(out, HasSubstr("a debug line"));
  EXPECT_THAT(out, Not(HasSubstr("a finer line")));
  EXPECT_THAT(out, HasSubstr("an info line"));
  EXPECT_THAT(out, Not(HasSubstr("a second debug line")));
}

TEST(InitLoggingTest, JsonOneObjectPerLine) {
  StderrCapture capture;
  InitLogging("logging_test", LogLevel::kInfo, LogFormat::kJson);
  LOG(INFO) << "job \"j-1\": RUNNING -> FAILED\nsecond line";
  VLOG(1) << "not at info";
  LOG(ERROR) << "an error";
  InitLogging("logging_test", LogLevel::kInfo, LogFormat::kText);
  LOG(INFO) << "text again";
  const std::vector<std::string> lines = Lines(capture.Take());
  ASSERT_THAT(lines, SizeIs(3));
  EXPECT_THAT(
      lines[0],
      MatchesRegex(R"(\{"time":"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]{6}Z",)"
                   R"("level":"info","program":"logging_test",)"
                   R"("file":"logging_test\.cc","line":[0-9]+,)"
                   R"("msg":"job \\"j-1\\": RUNNING -> FAILED\\nsecond line"\})"));
  EXPECT_THAT(lines[1], HasSubstr("\"level\":\"error\""));
  EXPECT_THAT(lines[1], HasSubstr("\"msg\":\"an error\"}"));
  // Back to text: glog's own line, not JSON.
  EXPECT_THAT(lines[2], MatchesRegex("I[0-9]{8} .*logging_test.cc:[0-9]+\\] text again"));
}

}  // namespace
}  // namespace pshard
