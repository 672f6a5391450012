#include "cli/export_command.h"

#include <sys/wait.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/test_checkpoints.h"
#include "cli/commands.h"
#include "common/clock.h"
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

// `pshardctl export ARGS` through the command runner (no coordinator: a
// connection attempt fails the test).
Outcome RunExport(std::vector<std::string> args,
                  OutputFormat format = OutputFormat::kTable) {
  args.insert(args.begin(), "export");
  CliOptions options;
  options.output = format;
  std::ostringstream out, err;
  CliIo io{&out, &err};
  Cancellation cancel;
  const int code = RunCommand(
      args, options, io,
      []() -> absl::StatusOr<std::unique_ptr<CoordinatorClient>> {
        ADD_FAILURE() << "export must not contact the coordinator";
        return absl::InternalError("no coordinator");
      },
      &cancel, Clock::Real());
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

  const Outcome json =
      RunExport({checkpoint::StepDirectory(root, 12), out}, OutputFormat::kJson);
  EXPECT_EQ(json.code, 0) << json.err;
  EXPECT_THAT(json.out, AllOf(HasSubstr("\"step\":12"), HasSubstr("\"parameters\":5")));
}

TEST(ExportCommandTest, UsageErrorsAndRefusedCheckpoints) {
  EXPECT_THAT(CommandHelp("export"),
              StartsWith("usage: pshardctl export CHECKPOINT OUT.safetensors"));
  EXPECT_THAT(UsageText(), HasSubstr("export CHECKPOINT"));
  EXPECT_EQ(RunExport({"only-one"}).code, 2);
  EXPECT_EQ(RunExport({"a", "b", "c"}).code, 2);
  const std::string empty = MakeTempDir("empty");
  const Outcome none = RunExport({empty, empty + "/out.safetensors"});
  EXPECT_EQ(none.code, 1);
  EXPECT_THAT(none.err, AllOf(StartsWith("pshardctl: "), HasSubstr("no checkpoint under")));
}

// The real binary, with an unknown flag refused as bad input.
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
