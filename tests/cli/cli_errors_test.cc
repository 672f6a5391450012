// pshardctl as a process, for what needs no cluster: input errors, an
// unreachable coordinator, help. Exit codes and the one-line messages are
// what scripts depend on.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/pshardctl_runner.h"
#include "tests/testing/subprocess.h"

namespace pshard::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

int Lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

TEST(CliErrorsTest, RefusedCoordinatorPortFailsAtOnceWithExit1) {
  const absl::Time start = absl::Now();
  // Port 1 on loopback: nothing serves it.
  CliResult r = RunPshardctl({"list", "--coordinator=127.0.0.1:1",
                              "--connect_timeout=30s"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, AllOf(StartsWith("pshardctl: cannot reach the coordinator "
                                      "at 127.0.0.1:1: the connection failed "
                                      "at once"),
                           HasSubstr("PSHARD_COORDINATOR")));
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.out, IsEmpty());
  // Not after the 30 s of --connect_timeout.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(CliErrorsTest, CoordinatorDefaultsToTheEnvironmentVariable) {
  CliResult r = RunPshardctl({"workers", "--connect_timeout=1s"},
                             {"PSHARD_COORDINATOR=127.0.0.1:2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("127.0.0.1:2"));
}

TEST(CliErrorsTest, BadSpecNamesTheFieldAndExits2BeforeConnecting) {
  const std::string spec = WriteTempFile("bad.json", R"({
    "name": "bad", "world_size": 2,
    "mlp": {"input_dim": 16, "output_dim": 4, "batch_size": 0},
    "optimizer": {"kind": "adam"}, "steps": 10})");
  // No coordinator at this address: the spec is refused before any attempt.
  const absl::Time start = absl::Now();
  CliResult r = RunPshardctl({"submit", spec, "--coordinator=127.0.0.1:1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, AllOf(StartsWith("pshardctl: invalid job spec "),
                           HasSubstr("batch_size")));
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.out, IsEmpty());
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
}

// Each kind of job-spec mistake, as the binary prints it: one line, the
// file, the place, what is wrong; exit 2 before any connection.
TEST(CliErrorsTest, JobSpecMistakesAreNamedForPeople) {
  struct Case {
    std::string json;
    std::string message;
  };
  const std::string good_head =
      "{\"name\": \"x\", \"world_size\": 2, \"optimizer\": {\"kind\": "
      "\"adam\"}, \"steps\": 5,\n";
  const Case cases[] = {
      {good_head + "\"mlp\": {\"input_dim\": 4, \"hidden_dims\": [null, "
                   "256], \"output_dim\": 2, \"batch_size\": 4}}",
       "mlp.hidden_dims[0]: null is not allowed in a list"},
      {good_head + "\"mlp\": {\"input_dim\": 4, \"output_dim\": 2, "
                   "\"batch_size\": 4}, \"backend\": \"mpi\"}",
       "backend: unknown value \"mpi\"; valid values: AUTO, NCCL, GLOO"},
      {good_head + "\"mlp\": {\"input_dim\": 4, \"output_dim\": 2, "
                   "\"batchsize\": 4}}",
       "mlp.batchsize: unknown field; did you mean batch_size?"},
      {good_head + "\"mlp\": {\"input_dim\": 4, \"output_dim\": 2}}",
       "mlp.batch_size: required: an integer in [1, 65536]"},
      {good_head + "\"mlp\": {\"input_dim\" 4}}",
       "JSON syntax error at line 2, column 21: Expected : between key:value "
       "pair."},
      {good_head + "\"mlp\": {\"input_dim\": \"four\"}}",
       "mlp.input_dim: must be an integer, got \"four\""},
  };
  for (const Case& c : cases) {
    const std::string spec = WriteTempFile("spec.json", c.json);
    CliResult r = RunPshardctl({"submit", spec, "--coordinator=127.0.0.1:1"});
    EXPECT_EQ(r.exit_code, 2) << c.json;
    EXPECT_EQ(r.err,
              absl::StrCat("pshardctl: invalid job spec ", spec, ": ",
                           c.message, "\n"));
  }
  const std::string dir = MakeTempDir("spec-dir");
  CliResult r = RunPshardctl({"submit", dir});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, absl::StrCat("pshardctl: cannot read job spec ", dir,
                                ": is a directory\n"));
}

TEST(CliErrorsTest, SubmitReadsTheSpecFromStdin) {
  const std::string spec = WriteTempFile("bad.json", R"({"name": "x", "world_size": 9999})");
  CliResult r = RunPshardctl({"submit", "-"}, {}, absl::Seconds(30),
                             /*stdin_path=*/spec);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, AllOf(StartsWith("pshardctl: invalid job spec on stdin: "),
                           HasSubstr("world_size")));
}

TEST(CliErrorsTest, LocalWithABadSpecExits2) {
  const std::string spec = WriteTempFile("bad.json", R"({"name": "x"})");
  CliResult r = RunPshardctl({"local", spec});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, StartsWith("pshardctl: invalid job spec "));
}

TEST(CliErrorsTest, UsageErrorsExit2) {
  CliResult r = RunPshardctl({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command \"frobnicate\""));
  r = RunPshardctl({"watch"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("missing JOB"));
  r = RunPshardctl({"list", "--output=yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--output"));
  r = RunPshardctl({"list", "--no_such_flag=1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown flag --no_such_flag=1"));
  // -o is --output.
  r = RunPshardctl({"list", "-o", "yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "pshardctl: --output: unknown format \"yaml\"; expected table or "
            "json\n");
  r = RunPshardctl({});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("usage: pshardctl COMMAND"));
}

TEST(CliErrorsTest, AFlagTheCommandDoesNotTakeExits2NamingBoth) {
  CliResult r = RunPshardctl({"cancel", "--limit=3", "job-1",
                              "--coordinator=127.0.0.1:1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, StartsWith("pshardctl: cancel does not take --limit "
                                "(its flags: --output, --reason,"));
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.out, IsEmpty());
}

TEST(CliErrorsTest, ABadFlagValueExits2WithThePrefix) {
  CliResult r = RunPshardctl({"list", "--limit=abc"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "pshardctl: --limit=abc: not an integer (see pshardctl --help)\n");
  r = RunPshardctl({"drain", "w-1", "--wait_timeout", "soon"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, StartsWith("pshardctl: --wait_timeout=soon: not a "
                                "duration"));
}

TEST(CliErrorsTest, VersionPrintsTheVersion) {
  CliResult r = RunPshardctl({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, MatchesRegex("pshardctl [0-9]+\\.[0-9]+\\.[0-9]+\n"));
}

TEST(CliErrorsTest, HelpForEveryCommand) {
  CliResult r = RunPshardctl({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("usage: pshardctl COMMAND"));
  for (const char* cmd : {"submit", "list", "get", "watch", "shards",
                          "workers", "cancel", "local"}) {
    r = RunPshardctl({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_THAT(r.out, StartsWith(std::string("usage: pshardctl ") + cmd)) << cmd;
    r = RunPshardctl({"help", cmd});
    EXPECT_EQ(r.exit_code, 0) << cmd;
  }
}

}  // namespace
}  // namespace pshard::testing
