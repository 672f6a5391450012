#include "cli/export_command.h"

#include <sys/wait.h>

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/test_checkpoints.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace pshard::cli {
namespace {

using ::pshard::testing::MakeTempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Outcome {
  int code;
  std::string out, err;
};

Outcome RunExport(std::vector<std::string> args) {
  args.insert(args.begin(), {"pshardctl", "export"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  const int code = ExportMain(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

TEST(ExportCommandTest, ExportsTheLatestCompleteCheckpoint) {
  const std::string root = MakeTempDir("ck");
  ASSERT_OK(checkpoint::testing::WriteCheckpoint(
                root, 12, 2, checkpoint::testing::MakeParameters(5, 12))
                .status());
  const std::string out = MakeTempDir("out") + "/params.safetensors";
  const Outcome table = RunExport({root, out});
  EXPECT_EQ(table.code, 0) << table.err;
  EXPECT_THAT(table.out, AllOf(StartsWith("exported 5 parameters of step 12"),
                               HasSubstr(out), HasSubstr("sha256 ")));
  ASSERT_OK_AND_ASSIGN(auto reader, checkpoint::SafetensorsReader::Open(out));
  EXPECT_EQ(reader->tensors().size(), 5u);

  const Outcome json = RunExport({checkpoint::StepDirectory(root, 12), out, "--output=json"});
  EXPECT_EQ(json.code, 0) << json.err;
  EXPECT_THAT(json.out, AllOf(HasSubstr("\"step\":12"), HasSubstr("\"parameters\":5")));
}

TEST(ExportCommandTest, UsageErrorsAndRefusedCheckpoints) {
  EXPECT_EQ(RunExport({"--help"}).code, 0);
  EXPECT_THAT(RunExport({"--help"}).out, StartsWith("usage: pshardctl export CHECKPOINT"));
  EXPECT_EQ(RunExport({"only-one"}).code, 2);
  EXPECT_EQ(RunExport({"a", "b", "c"}).code, 2);
  EXPECT_THAT(RunExport({"a", "b", "--frobnicate"}).err, HasSubstr("unknown flag --frobnicate"));
  EXPECT_EQ(RunExport({"a", "b", "--output=xml"}).code, 2);
  const std::string empty = MakeTempDir("empty");
  const Outcome none = RunExport({empty, empty + "/out.safetensors"});
  EXPECT_EQ(none.code, 1);
  EXPECT_THAT(none.err, AllOf(StartsWith("pshardctl: "), HasSubstr("no checkpoint under")));
}

// The real binary: `export` is dispatched before any other flag handling.
TEST(ExportCommandTest, ThePshardctlBinaryRunsIt) {
  const std::string root = MakeTempDir("ck");
  ASSERT_OK(checkpoint::testing::WriteCheckpoint(
                root, 3, 3, checkpoint::testing::MakeParameters(4, 3))
                .status());
  const std::string dir = MakeTempDir("bin");
  const std::string out = dir + "/p.safetensors";
  ASSERT_OK_AND_ASSIGN(
      auto child, pshard::testing::Subprocess::Start(
                      {pshard::testing::RunfilePath("cli/pshardctl"), "export",
                       root, out},
                      {}, dir + "/log.txt"));
  ASSERT_OK_AND_ASSIGN(int status, child->Wait(absl::Seconds(60)));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << pshard::testing::ReadFile(dir + "/log.txt");
  EXPECT_THAT(pshard::testing::ReadFile(dir + "/log.txt"),
              HasSubstr("exported 4 parameters of step 3"));
  ASSERT_OK_AND_ASSIGN(auto reader, checkpoint::SafetensorsReader::Open(out));
  EXPECT_EQ(reader->tensors().size(), 4u);
}

}  // namespace
}  // namespace pshard::cli
