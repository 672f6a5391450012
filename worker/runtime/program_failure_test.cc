#include "worker/runtime/program_failure.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "worker/runtime/result_reporter.h"

namespace pshard::worker {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

void WriteRaw(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(text.c_str(), f);
  std::fclose(f);
}

TEST(ProgramFailureTest, SitsBesideTheRanksLog) {
  EXPECT_EQ(ProgramFailurePath("/var/log/pshard", "job-7", 2),
            "/var/log/pshard/job-7/rank-2.error.json");
}

TEST(ProgramFailureTest, APeerFailureReadsBackAsPeer) {
  const std::string path = TempPath("peer.error.json");
  ASSERT_OK(WriteProgramFailure(
      path, absl::UnavailableError("receiving from rank 1: connection reset")));
  std::optional<ProgramFailure> read = ReadProgramFailure(path);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->cause, v1::FAILURE_CAUSE_PEER);
  EXPECT_EQ(read->error, "receiving from rank 1: connection reset");
}

TEST(ProgramFailureTest, AMarkedCauseIsKept) {
  const std::string path = TempPath("job.error.json");
  ASSERT_OK(WriteProgramFailure(
      path, WithFailureCause(absl::UnavailableError("disk"),
                             v1::FAILURE_CAUSE_JOB)));
  std::optional<ProgramFailure> read = ReadProgramFailure(path);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->cause, v1::FAILURE_CAUSE_JOB);
}

TEST(ProgramFailureTest, MissingMalformedOrUnknownIsNothing) {
  EXPECT_FALSE(ReadProgramFailure(TempPath("absent.error.json")).has_value());
  const std::string path = TempPath("bad.error.json");
  WriteRaw(path, "{not json");
  EXPECT_FALSE(ReadProgramFailure(path).has_value());
  WriteRaw(path, R"({"cause": 77, "error": "x"})");
  EXPECT_FALSE(ReadProgramFailure(path).has_value());
  WriteRaw(path, R"({"error": "no cause"})");
  EXPECT_FALSE(ReadProgramFailure(path).has_value());
  WriteRaw(path, std::string(70 << 10, ' '));
  EXPECT_FALSE(ReadProgramFailure(path).has_value());
}

}  // namespace
}  // namespace pshard::worker
