// End to end, program jobs through the real binaries: every worker's agent
// starts the job's program for its rank with the environment contract
// (docs/api.md, "Program jobs"), supervises it and stops it; `pshardctl logs`
// (the real binary) reads the programs' output back from the workers. The programs are
// small shell scripts that write what the test checks (their environment,
// their pid) into files; every wait has a deadline, and no program process
// may outlive its job.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <fstream>
#include <memory>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/job_spec.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/pshardctl_runner.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"

namespace pshard::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// Creates an empty file at `path` (the test's signal to a program).
void WriteTempFileAt(const std::string& path) {
  std::ofstream file(path);
  ASSERT_TRUE(file.good()) << path;
}

// Every program gets OUT (a fresh directory) and writes
// $OUT/pid-$RANK (its own pid, written atomically) first.
constexpr char kWritePid[] =
    "echo $$ > \"$OUT/pid-$RANK.tmp\" && mv \"$OUT/pid-$RANK.tmp\" "
    "\"$OUT/pid-$RANK\"\n";

class ProgramE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = MakeTempDir("program-out");
    ClusterOptions options;
    options.workers = 2;
    log_root_ = MakeTempDir("program-logs");
    options.worker_flags = {absl::StrCat("--log_dir=", log_root_, "/w{i}")};
    ASSERT_OK_AND_ASSIGN(cluster_, Cluster::Start(options));
  }

  // A 2-rank program job running `script` under /bin/sh.
  v1::JobSpec Program(const std::string& script, double grace_seconds = 5) {
    v1::JobSpec spec;
    spec.set_name("program");
    spec.set_world_size(2);
    v1::ProgramWorkload* program = spec.mutable_program();
    program->add_argv("/bin/sh");
    program->add_argv(WriteTempFile("program.sh", absl::StrCat(kWritePid, script)));
    (*program->mutable_env())["OUT"] = out_;
    program->set_grace_period_seconds(grace_seconds);
    return spec;
  }

  // The pid rank `rank`'s program wrote, once it has (0 if it never did).
  pid_t WaitForPid(int rank, const std::string& name = "pid") {
    pid_t pid = 0;
    const std::string path = absl::StrCat(out_, "/", name, "-", rank);
    WaitUntil(
        [&] {
          return absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(path)),
                                  &pid) &&
                 pid > 0;
        },
        absl::Seconds(30));
    return pid;
  }

  bool WaitForGone(pid_t pid, absl::Duration timeout) {
    return WaitUntil([&] { return !ProcessAlive(pid); }, timeout);
  }

  std::string out_;
  std::string log_root_;
  std::unique_ptr<Cluster> cluster_;
};

std::map<std::string, std::string> ParseEnv(const std::string& text) {
  std::map<std::string, std::string> env;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits('=', 1));
    env[kv.first] = kv.second;
  }
  return env;
}

TEST_F(ProgramE2eTest, TwoRanksSucceedWithTheAgentsEnvironment) {
  v1::JobSpec spec = Program(
      "env > \"$OUT/env-$RANK.tmp\" && mv \"$OUT/env-$RANK.tmp\" "
      "\"$OUT/env-$RANK\"\n"
      "echo \"hello from rank $RANK\"\n");
  (*spec.mutable_program()->mutable_env())["K"] = "V";
  spec.mutable_program()->set_working_dir(out_);
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster_->Submit(spec));
  ASSERT_OK_AND_ASSIGN(v1::Job ended,
                       cluster_->WaitForEnd(job.id(), absl::Seconds(60)));
  ASSERT_EQ(ended.state(), v1::SUCCEEDED) << ended.reason() << cluster_->Logs();

  std::string master_port;
  std::vector<std::string> worker_ids;
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    auto env = ParseEnv(ReadFile(absl::StrCat(out_, "/env-", rank)));
    EXPECT_EQ(env["PSHARD_COORDINATOR"], cluster_->address());
    EXPECT_EQ(env["PSHARD_JOB_ID"], job.id());
    EXPECT_EQ(env["PSHARD_EPOCH"], absl::StrCat(ended.epoch()));
    EXPECT_EQ(env["PSHARD_RESTART_COUNT"], "0");
    EXPECT_EQ(env.count("PSHARD_RESUME_FROM"), 0u);
    EXPECT_EQ(env["PSHARD_RANK"], absl::StrCat(rank));
    EXPECT_EQ(env["PSHARD_WORLD_SIZE"], "2");
    EXPECT_THAT(env["PSHARD_WORKER_ID"], StartsWith("w-"));
    worker_ids.push_back(env["PSHARD_WORKER_ID"]);
    EXPECT_EQ(env["PSHARD_HOSTNAME"], "127.0.0.1");
    EXPECT_EQ(env["PSHARD_COLLECTIVE_TIMEOUT_SECONDS"], "60");
    EXPECT_EQ(env["RANK"], absl::StrCat(rank));
    EXPECT_EQ(env["WORLD_SIZE"], "2");
    // Both workers are on host 127.0.0.1: the job's two ranks there.
    EXPECT_EQ(env["LOCAL_RANK"], absl::StrCat(rank));
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    int port = 0;
    EXPECT_TRUE(absl::SimpleAtoi(env["MASTER_PORT"], &port) && port > 0 &&
                port < 65536)
        << env["MASTER_PORT"];
    if (rank == 0) master_port = env["MASTER_PORT"];
    EXPECT_EQ(env["MASTER_PORT"], master_port) << "every rank meets rank 0";
    EXPECT_EQ(env["K"], "V");
    EXPECT_EQ(env["PWD"], out_);
    // The worker's own environment is inherited.
    EXPECT_FALSE(env["PATH"].empty());
  }
  EXPECT_NE(worker_ids[0], worker_ids[1]);
  // Each rank's output is in its worker's log for (job, rank).
  std::string logs;
  for (int w = 0; w < 2; ++w) {
    for (int rank = 0; rank < 2; ++rank) {
      logs += ReadFile(absl::StrCat(log_root_, "/w", w, "/", job.id(),
                                    "/rank-", rank, ".log"));
    }
  }
  EXPECT_THAT(logs, HasSubstr("hello from rank 0"));
  EXPECT_THAT(logs, HasSubstr("hello from rank 1"));
  EXPECT_THAT(logs, HasSubstr("program exited with code 0"));
}

TEST_F(ProgramE2eTest, LogsShowsTheOutputOfAFinishedJob) {
  ASSERT_OK_AND_ASSIGN(
      v1::Job job,
      cluster_->Submit(Program("echo \"hello from rank $RANK\"\n"
                               "echo \"to stderr from rank $RANK\" >&2\n")));
  ASSERT_OK_AND_ASSIGN(v1::Job ended,
                       cluster_->WaitForEnd(job.id(), absl::Seconds(60)));
  ASSERT_EQ(ended.state(), v1::SUCCEEDED) << ended.reason() << cluster_->Logs();
  const std::string coordinator = absl::StrCat("--coordinator=", cluster_->address());

  // Every rank, each line prefixed, rank 0 first; read from the workers
  // after the job ended.
  CliResult all = RunPshardctl({"logs", job.id(), coordinator, "--insecure"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_THAT(all.out, HasSubstr("[rank 0] hello from rank 0\n"));
  EXPECT_THAT(all.out, HasSubstr("[rank 0] to stderr from rank 0\n"));
  EXPECT_THAT(all.out, HasSubstr("[rank 1] hello from rank 1\n"));
  EXPECT_THAT(all.out, HasSubstr("[rank 1] [pshard: program exited with code 0]"));
  EXPECT_LT(all.out.find("[rank 0]"), all.out.find("[rank 1]"));

  CliResult one = RunPshardctl({"logs", job.id(), "--rank=1", coordinator, "--insecure"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_THAT(one.out, HasSubstr("\nhello from rank 1\n"));
  EXPECT_THAT(one.out, Not(HasSubstr("rank 0")));

  CliResult out_of_range = RunPshardctl({"logs", job.id(), "--rank=2", coordinator, "--insecure"});
  EXPECT_EQ(out_of_range.exit_code, 2);
  EXPECT_THAT(out_of_range.err, HasSubstr("has ranks 0 to 1"));
}

TEST_F(ProgramE2eTest, LogsFollowStreamsARunningProgramUntilItExits) {
  // Each rank writes a line, waits for the test's go, writes another, exits.
  ASSERT_OK_AND_ASSIGN(
      v1::Job job,
      cluster_->Submit(Program(
          "echo \"first line of rank $RANK\"\n"
          "while [ ! -e \"$OUT/go\" ]; do sleep 0.05; done\n"
          "echo \"last line of rank $RANK\"\n")));
  ASSERT_GT(WaitForPid(0), 0) << cluster_->Logs();
  ASSERT_GT(WaitForPid(1), 0) << cluster_->Logs();
  const std::string output = absl::StrCat(MakeTempDir("follow"), "/out");
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Subprocess> follower,
      Subprocess::Start({RunfilePath("cli/pshardctl"), "logs", job.id(),
                         "--follow",
                         absl::StrCat("--coordinator=", cluster_->address()),
                         "--insecure"},
                        {}, output));
  // Both first lines arrive while the programs still run.
  EXPECT_TRUE(WaitUntil(
      [&] {
        const std::string text = ReadFile(output);
        return absl::StrContains(text, "[rank 0] first line of rank 0\n") &&
               absl::StrContains(text, "[rank 1] first line of rank 1\n");
      },
      absl::Seconds(30)))
      << ReadFile(output);
  EXPECT_TRUE(follower->running()) << "the follower ended before the programs";
  EXPECT_THAT(ReadFile(output), Not(HasSubstr("last line")));

  WriteTempFileAt(absl::StrCat(out_, "/go"));
  // The follower prints the last lines and ends by itself once the programs
  // have exited.
  ASSERT_OK_AND_ASSIGN(int status, follower->Wait(absl::Seconds(30)));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(output);
  const std::string text = ReadFile(output);
  EXPECT_THAT(text, HasSubstr("[rank 0] last line of rank 0\n"));
  EXPECT_THAT(text, HasSubstr("[rank 1] last line of rank 1\n"));
  EXPECT_THAT(text, HasSubstr("[rank 1] [pshard: program exited with code 0]"));
  ASSERT_OK_AND_ASSIGN(v1::Job ended,
                       cluster_->WaitForEnd(job.id(), absl::Seconds(30)));
  EXPECT_EQ(ended.state(), v1::SUCCEEDED) << ended.reason();
}

TEST_F(ProgramE2eTest, RankExitingThreeFailsTheJobAndStopsTheOther) {
  // Rank 1 exits 3 once rank 0 is up; rank 0 would run for 10 minutes, with
  // a child of its own, unless stopped.
  ASSERT_OK_AND_ASSIGN(
      v1::Job job,
      cluster_->Submit(Program(
          "if [ \"$RANK\" = 1 ]; then\n"
          "  while [ ! -s \"$OUT/pid-0\" ]; do sleep 0.05; done\n"
          "  exit 3\n"
          "fi\n"
          "sleep 600 & echo $! > \"$OUT/child-0.tmp\"; "
          "mv \"$OUT/child-0.tmp\" \"$OUT/child-0\"; wait\n")));
  const pid_t rank0 = WaitForPid(0);
  const pid_t rank1 = WaitForPid(1);
  const pid_t child0 = WaitForPid(0, "child");
  ASSERT_GT(rank0, 0) << cluster_->Logs();
  ASSERT_GT(rank1, 0) << cluster_->Logs();
  ASSERT_GT(child0, 0) << cluster_->Logs();
  const absl::Time started = absl::Now();
  ASSERT_OK_AND_ASSIGN(v1::Job ended,
                       cluster_->WaitForEnd(job.id(), absl::Seconds(30)));
  EXPECT_EQ(ended.state(), v1::FAILED);
  // The rank and worker are named once, by the coordinator.
  EXPECT_THAT(ended.reason(), StartsWith("rank 1 (worker w-"));
  EXPECT_THAT(ended.reason(), HasSubstr("program exited with status 3"));
  EXPECT_THAT(ended.reason(), Not(HasSubstr("failed: rank 1 (worker")));
  EXPECT_LT(absl::Now() - started, absl::Seconds(5))
      << "the job failed only after " << absl::Now() - started;
  // Rank 0's program and its child are stopped (SIGTERM, well within the
  // grace period); nothing is left.
  EXPECT_TRUE(WaitForGone(rank0, absl::Seconds(10))) << "rank 0 pid " << rank0;
  EXPECT_TRUE(WaitForGone(child0, absl::Seconds(10))) << "child pid " << child0;
  EXPECT_FALSE(ProcessAlive(rank1));
  EXPECT_TRUE(cluster_->WaitForIdle(2, absl::Seconds(10))) << cluster_->Logs();
}

// A program that asks for restarts is restarted after its own failure and
// told so: PSHARD_RESTART_COUNT counts the restarts (no checkpoint here, so
// no PSHARD_RESUME_FROM).
TEST_F(ProgramE2eTest, ARestartedProgramIsToldItsRestartCount) {
  v1::JobSpec spec = Program(
      "if [ \"$PSHARD_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 1 ]; then exit 3; fi\n"
      "env > \"$OUT/env-$RANK.tmp\" && mv \"$OUT/env-$RANK.tmp\" "
      "\"$OUT/env-$RANK\"\n");
  spec.set_max_restarts(1);
  spec.set_restart_on_program_failure(true);
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster_->Submit(spec));
  ASSERT_OK_AND_ASSIGN(v1::Job ended,
                       cluster_->WaitForEnd(job.id(), absl::Seconds(60)));
  ASSERT_EQ(ended.state(), v1::SUCCEEDED) << ended.reason() << cluster_->Logs();
  EXPECT_EQ(ended.restarts(), 1);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    auto env = ParseEnv(ReadFile(absl::StrCat(out_, "/env-", rank)));
    EXPECT_EQ(env["PSHARD_RESTART_COUNT"], "1");
    EXPECT_EQ(env["PSHARD_EPOCH"], absl::StrCat(ended.epoch()));
    EXPECT_EQ(env.count("PSHARD_RESUME_FROM"), 0u);
  }
}

TEST_F(ProgramE2eTest, CancelEndsEveryProgramWithinTheGracePeriod) {
  // Rank 0 ignores SIGTERM, so only SIGKILL after the grace ends it; rank 1
  // ends on SIGTERM.
  constexpr double kGrace = 2;
  ASSERT_OK_AND_ASSIGN(
      v1::Job job,
      cluster_->Submit(Program("if [ \"$RANK\" = 0 ]; then trap '' TERM; fi\n"
                               "while true; do sleep 0.2; done\n",
                               kGrace)));
  const pid_t rank0 = WaitForPid(0);
  const pid_t rank1 = WaitForPid(1);
  ASSERT_GT(rank0, 0) << cluster_->Logs();
  ASSERT_GT(rank1, 0) << cluster_->Logs();
  const absl::Time cancelled = absl::Now();
  ASSERT_OK(cluster_->Cancel(job.id()).status());
  EXPECT_TRUE(WaitForGone(rank1, absl::Seconds(kGrace)))
      << "rank 1 survived SIGTERM";
  EXPECT_TRUE(WaitForGone(rank0, absl::Seconds(kGrace + 3)))
      << "rank 0 outlived the grace period";
  EXPECT_GE(absl::Now() - cancelled, absl::Seconds(kGrace) - absl::Milliseconds(200))
      << "rank 0 ignores SIGTERM: only SIGKILL after the grace ends it";
  ASSERT_OK_AND_ASSIGN(v1::Job ended,
                       cluster_->WaitForEnd(job.id(), absl::Seconds(10)));
  EXPECT_EQ(ended.state(), v1::CANCELLED);
  EXPECT_TRUE(cluster_->WaitForIdle(2, absl::Seconds(10))) << cluster_->Logs();
}

TEST_F(ProgramE2eTest, KilledAgentTakesItsProgramWithIt) {
  ASSERT_OK_AND_ASSIGN(
      v1::Job job,
      cluster_->Submit(Program("sleep 600 & echo $! > \"$OUT/child-$RANK.tmp\"; "
                               "mv \"$OUT/child-$RANK.tmp\" \"$OUT/child-$RANK\"; "
                               "wait\n")));
  const pid_t rank0 = WaitForPid(0);
  const pid_t rank1 = WaitForPid(1);
  const pid_t child0 = WaitForPid(0, "child");
  const pid_t child1 = WaitForPid(1, "child");
  ASSERT_TRUE(rank0 > 0 && rank1 > 0 && child0 > 0 && child1 > 0)
      << cluster_->Logs();
  // Worker 1 runs some rank; kill -9 its agent.
  ASSERT_OK_AND_ASSIGN(auto status, cluster_->WorkerStatus(1));
  ASSERT_TRUE(status.rank() == 0 || status.rank() == 1) << status.DebugString();
  const pid_t program = status.rank() == 0 ? rank0 : rank1;
  const pid_t child = status.rank() == 0 ? child0 : child1;
  ASSERT_OK(cluster_->worker(1).Signal(SIGKILL));
  EXPECT_TRUE(WaitForGone(program, absl::Seconds(5)))
      << "program " << program << " outlived its agent";
  EXPECT_TRUE(WaitForGone(child, absl::Seconds(5)))
      << "the program's child " << child << " outlived the agent";
  // The job fails (worker lost) and the other rank's program is stopped.
  ASSERT_OK_AND_ASSIGN(v1::Job ended,
                       cluster_->WaitForEnd(job.id(), absl::Seconds(30)));
  EXPECT_EQ(ended.state(), v1::FAILED);
  const pid_t other = status.rank() == 0 ? rank1 : rank0;
  EXPECT_TRUE(WaitForGone(other, absl::Seconds(10)));
}

TEST_F(ProgramE2eTest, MissingExecutableFailsNamingItAndTheRank) {
  v1::JobSpec spec = Program("");
  spec.mutable_program()->clear_argv();
  spec.mutable_program()->add_argv("pshard-no-such-program");
  spec.mutable_program()->add_argv("--flag");
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster_->Submit(spec));
  ASSERT_OK_AND_ASSIGN(v1::Job ended,
                       cluster_->WaitForEnd(job.id(), absl::Seconds(30)));
  EXPECT_EQ(ended.state(), v1::FAILED);
  EXPECT_THAT(ended.reason(), HasSubstr("pshard-no-such-program"));
  EXPECT_THAT(ended.reason(), HasSubstr("not found in PATH"));
  EXPECT_THAT(ended.reason(), HasSubstr("rank "));
  EXPECT_TRUE(cluster_->WaitForIdle(2, absl::Seconds(10))) << cluster_->Logs();
}

TEST_F(ProgramE2eTest, BadProgramsAreRejectedAtSubmitNamingTheField) {
  v1::JobSpec empty = Program("");
  empty.mutable_program()->clear_argv();
  EXPECT_THAT(cluster_->Submit(empty),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("program.argv")));
  v1::JobSpec big = Program("");
  (*big.mutable_program()->mutable_env())["BIG"] =
      std::string(kMaxProgramEnvBytes, 'x');
  EXPECT_THAT(cluster_->Submit(big),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("program.env: at most")));
  v1::JobSpec reserved = Program("");
  (*reserved.mutable_program()->mutable_env())["RANK"] = "7";
  EXPECT_THAT(cluster_->Submit(reserved),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("program.env[\"RANK\"]")));
}

}  // namespace
}  // namespace pshard::testing
