// `pshardctl local` end to end with the real coordinator and workers: the
// README's first command runs to completion, Ctrl-C stops it, and in both
// cases no process it started is left behind. Also replays a generated data
// set and checks the final parameters against numpy's reference.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/pshardctl_runner.h"
#include "tests/testing/subprocess.h"

namespace pshard {
namespace {

using ::pshard::testing::MakeTempDir;
using ::pshard::testing::ProcessAlive;
using ::pshard::testing::ReadFile;
using ::pshard::testing::RunfilePath;
using ::pshard::testing::Subprocess;
using ::pshard::testing::WaitUntil;
using ::testing::AllOf;
using ::testing::HasSubstr;

// The pids `pshardctl local` reported ("coordinator  pid N", "worker i  pid N").
std::vector<pid_t> ReportedPids(const std::string& output) {
  std::vector<pid_t> pids;
  static const std::regex kPid(R"((coordinator|worker \d+)\s+pid (\d+))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), kPid);
       it != std::sregex_iterator(); ++it) {
    pid_t pid = 0;
    if (absl::SimpleAtoi((*it)[2].str(), &pid)) pids.push_back(pid);
  }
  return pids;
}

void ExpectAllGone(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    EXPECT_TRUE(WaitUntil([pid] { return !ProcessAlive(pid); }, absl::Seconds(5)))
        << "process " << pid << " survived pshardctl local";
  }
}

struct LocalRun {
  int exit_code = -1;
  std::string output;
};

LocalRun RunLocal(const std::vector<std::string>& args, const std::string& log,
             absl::Duration timeout) {
  std::vector<std::string> argv = {RunfilePath("cli/pshardctl"), "local"};
  argv.insert(argv.end(), args.begin(), args.end());
  LocalRun run;
  auto process = Subprocess::Start(argv, {}, log);
  EXPECT_OK(process.status());
  if (!process.ok()) return run;
  absl::StatusOr<int> status = (*process)->Wait(timeout);
  EXPECT_OK(status.status());
  if (status.ok() && WIFEXITED(*status)) run.exit_code = WEXITSTATUS(*status);
  run.output = ReadFile(log);
  return run;
}

TEST(LocalE2eTest, DefaultDemoRunsToCompletionAndLeavesNoProcess) {
  const std::string run_dir = MakeTempDir("demo");
  LocalRun run = RunLocal({"--run_dir=" + run_dir}, run_dir + ".log",
                     absl::Seconds(120));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output,
              AllOf(HasSubstr("pshard local cluster: 2 CPU workers"),
                    HasSubstr("BUCKET"),
                    // The shard table docs/user-guide.md shows for the demo.
                    HasSubstr("policy balanced  imbalance 1.515  epoch 1  "
                              "buckets 3  total 338.1 KiB"),
                    HasSubstr("step 200/200 (100%)"), HasSubstr("SUCCEEDED"),
                    HasSubstr("final parameters: "),
                    HasSubstr("stopped 2 workers and the coordinator")));
  struct stat st;
  const std::string params = run_dir + "/output/params.safetensors";
  EXPECT_EQ(stat(params.c_str(), &st), 0) << params << "\n" << run.output;
  const std::vector<pid_t> pids = ReportedPids(run.output);
  EXPECT_EQ(pids.size(), 3u) << run.output;
  ExpectAllGone(pids);
}

TEST(LocalE2eTest, CtrlCCancelsAndStopsEverything) {
  const std::string dir = MakeTempDir("interrupt");
  const std::string spec = dir + "/long.json";
  std::ofstream(spec) << R"({
    "name": "e2e-interrupted", "world_size": 2, "backend": "gloo",
    "synthetic": {"num_parameters": 4096, "tensor_numel": 1024},
    "optimizer": {"kind": "sgd", "hyper_parameters": {"lr": 0.01}},
    "steps": 100000000, "progress_every": 100})";
  const std::string log = dir + "/pshardctl.log";
  auto process = Subprocess::Start(
      {RunfilePath("cli/pshardctl"), "local", spec, "--run_dir=" + dir + "/run"},
      {}, log);
  ASSERT_OK(process.status());
  // Interrupt once the job is running (its shard table is printed).
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(log).find("policy ") !=
                                     std::string::npos; },
                        absl::Seconds(60)))
      << ReadFile(log);
  ASSERT_OK((*process)->Signal(SIGINT));
  absl::StatusOr<int> status = (*process)->Wait(absl::Seconds(60));
  ASSERT_OK(status.status()) << ReadFile(log);
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 130) << ReadFile(log);
  const std::string output = ReadFile(log);
  EXPECT_THAT(output, AllOf(HasSubstr("interrupted"),
                            HasSubstr("stopped 2 workers and the coordinator")));
  const std::vector<pid_t> pids = ReportedPids(output);
  EXPECT_EQ(pids.size(), 3u) << output;
  ExpectAllGone(pids);
}

TEST(LocalE2eTest, KilledPshardctlTakesItsChildrenWithIt) {
  // SIGKILL leaves pshardctl no chance to clean up: PR_SET_PDEATHSIG must.
  const std::string dir = MakeTempDir("sigkill");
  const std::string log = dir + "/pshardctl.log";
  auto process = Subprocess::Start(
      {RunfilePath("cli/pshardctl"), "local", "--keep_running",
       "--run_dir=" + dir + "/run"},
      {}, log);
  ASSERT_OK(process.status());
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(log).find("still running") !=
                                     std::string::npos; },
                        absl::Seconds(60)))
      << ReadFile(log);
  const std::vector<pid_t> pids = ReportedPids(ReadFile(log));
  ASSERT_EQ(pids.size(), 3u) << ReadFile(log);
  for (pid_t pid : pids) EXPECT_TRUE(ProcessAlive(pid));
  ASSERT_OK((*process)->Signal(SIGKILL));
  ASSERT_OK((*process)->Wait(absl::Seconds(10)).status());
  ExpectAllGone(pids);
}

TEST(LocalE2eTest, ReplayMatchesTheNumpyReference) {
  const std::string dir = MakeTempDir("replay");
  const std::string data = dir + "/data";
  const std::string script = RunfilePath("examples/make_replay_data.py");
  {
    auto gen = Subprocess::Start({"/usr/bin/python3", script, "--out", data},
                                 {}, dir + "/gen.log");
    ASSERT_OK(gen.status());
    absl::StatusOr<int> status = (*gen)->Wait(absl::Seconds(60));
    ASSERT_OK(status.status());
    ASSERT_EQ(WEXITSTATUS(*status), 0) << ReadFile(dir + "/gen.log");
  }
  // examples/replay_small.json with the data where this test put it.
  const std::string spec = dir + "/replay.json";
  std::ofstream(spec) << absl::StrReplaceAll(
      ReadFile(RunfilePath("examples/replay_small.json")),
      {{"/tmp/pshard-replay-small", data}});

  LocalRun run = RunLocal({spec, "--run_dir=" + dir + "/run"}, dir + "/local.log",
                     absl::Seconds(120));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // The size-blind assignment docs/user-guide.md describes for this example.
  EXPECT_THAT(run.output,
              HasSubstr("policy round_robin  imbalance 1.218  epoch 1  buckets 3"));
  ExpectAllGone(ReportedPids(run.output));

  const std::string params = dir + "/run/output/params.safetensors";
  auto check = Subprocess::Start(
      {"/usr/bin/python3", script, "--out", data, "--check", params}, {},
      dir + "/check.log");
  ASSERT_OK(check.status());
  absl::StatusOr<int> status = (*check)->Wait(absl::Seconds(60));
  ASSERT_OK(status.status());
  EXPECT_EQ(WEXITSTATUS(*status), 0) << ReadFile(dir + "/check.log");
}

}  // namespace
}  // namespace pshard
