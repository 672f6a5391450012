#include "cli/commands.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cli/client.h"
#include "common/fake_clock.h"
#include "common/job_spec.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "tests/testing/in_process_coordinator.h"
#include "tests/testing/subprocess.h"

namespace pshard::cli {
namespace {

using ::pshard::testing::InProcessCoordinator;
using ::pshard::testing::RpcLog;
using ::pshard::testing::RunfilePath;
using ::pshard::testing::WriteTempFile;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kValidSpec[] = R"json({
  "name": "test-job",
  "world_size": 2,
  "mlp": {"input_dim": 4, "hidden_dims": [8], "output_dim": 2, "batch_size": 16},
  "optimizer": {"kind": "adam"},
  "steps": 5
})json";

// Every test runs pshardctl's commands against the real coordinator
// (tests/testing's InProcessCoordinator), on an in-process channel. Jobs get
// into the states a test needs the way they do in production: submitted,
// placed on (simulated) workers, reported on by those workers. pshardctl's
// own waits run on cli_clock_, a FakeClock.
class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(coordinator_, InProcessCoordinator::Start());
  }

  // Runs `args` against the coordinator; returns the exit code.
  int Run(std::vector<std::string> args, bool tty = false) {
    out_.str("");
    err_.str("");
    CliIo io{&out_, &err_, tty};
    return RunCommand(args, options_, io, MakeConnector(), &cancel_,
                      cli_clock_);
  }

  Connector MakeConnector() {
    return [this]() -> absl::StatusOr<std::unique_ptr<CoordinatorClient>> {
      ++connects_;
      return std::make_unique<CoordinatorClient>(
          coordinator_->Channel(), "the in-process coordinator",
          absl::Seconds(5));
    };
  }

  v1::JobSpec ValidSpec() { return *ParseJobSpecJson(kValidSpec); }

  // Submits ValidSpec() directly; returns the job id (the job QUEUED).
  std::string AddJob() {
    absl::StatusOr<v1::Job> job = coordinator_->SubmitJob(ValidSpec());
    EXPECT_OK(job);
    return job.ok() ? job->id() : "";
  }

  // A job of ValidSpec() on simulated workers, STARTING; empty on failure.
  std::vector<v1::RunJobDirective> StartJob() {
    absl::StatusOr<std::vector<v1::RunJobDirective>> ranks =
        coordinator_->StartJob(ValidSpec());
    EXPECT_OK(ranks);
    return ranks.ok() ? *ranks : std::vector<v1::RunJobDirective>();
  }

  // A job of ValidSpec() RUNNING on simulated workers.
  std::vector<v1::RunJobDirective> RunningJob() {
    std::vector<v1::RunJobDirective> ranks = StartJob();
    EXPECT_OK(coordinator_->ReportLayout(ranks, kBuckets));
    return ranks;
  }

  // A job that FAILED: rank 1 reported `error`. Returns the job.
  v1::Job FailedJob(const std::string& error) {
    std::vector<v1::RunJobDirective> ranks = RunningJob();
    if (ranks.size() != 2) return v1::Job();
    EXPECT_OK(coordinator_->ReportResult(ranks[1], absl::InternalError(error)));
    absl::StatusOr<v1::Job> job = coordinator_->GetJob(ranks[1].job_id());
    EXPECT_OK(job);
    if (!job.ok()) return v1::Job();
    EXPECT_EQ(job->state(), v1::FAILED);
    EXPECT_THAT(job->reason(), HasSubstr(error));
    return *job;
  }

  // The reason of the job's event into state `to`.
  std::string ReasonOf(const std::string& job_id, v1::JobState to) {
    absl::StatusOr<std::vector<v1::JobEvent>> events =
        coordinator_->Events(job_id);
    EXPECT_OK(events);
    if (!events.ok()) return "";
    for (const v1::JobEvent& e : *events) {
      if (e.has_state_change() && e.state_change().to() == to) {
        return e.state_change().reason();
      }
    }
    ADD_FAILURE() << job_id << " never went " << v1::JobState_Name(to);
    return "";
  }

  size_t NumJobs() {
    absl::StatusOr<std::vector<v1::Job>> jobs = coordinator_->ListJobs();
    EXPECT_OK(jobs);
    return jobs.ok() ? jobs->size() : 0;
  }

  // Four buckets of 4, 3, 2 and 1 MiB: 5 MiB for each of two ranks.
  const std::vector<int64_t> kBuckets = {4 << 20, 3 << 20, 2 << 20, 1 << 20};

  std::unique_ptr<InProcessCoordinator> coordinator_;
  FakeClock cli_clock_;
  CliOptions options_;
  Cancellation cancel_;
  std::ostringstream out_;
  std::ostringstream err_;
  int connects_ = 0;
};

TEST_F(CommandsTest, SubmitPrintsTheJobId) {
  const std::string path = WriteTempFile("ok.json", kValidSpec);
  EXPECT_EQ(Run({"submit", path}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "job-1\n");
  // Where it stands goes to stderr: no workers yet.
  EXPECT_EQ(err_.str(),
            "job-1: QUEUED: submitted; needs 2 workers; 0 are registered and "
            "not draining\n");
  ASSERT_OK_AND_ASSIGN(v1::Job job, coordinator_->GetJob("job-1"));
  EXPECT_EQ(job.spec().name(), "test-job");
  EXPECT_EQ(job.spec().world_size(), 2);
}

TEST_F(CommandsTest, SubmitEveryExampleSpec) {
  for (const char* file :
       {"mlp_adam_2workers.json", "synthetic_benchmark.json",
        "replay_small.json", "torch_digits/job.json", "torch_lm/job.json"}) {
    EXPECT_EQ(Run({"submit", RunfilePath(absl::StrCat("examples/", file))}),
              kExitOk)
        << file << ": " << err_.str();
  }
  EXPECT_EQ(NumJobs(), 5u);
}

TEST_F(CommandsTest, SubmitJsonOutputIsTheJob) {
  options_.output = OutputFormat::kJson;
  const std::string path = WriteTempFile("ok.json", kValidSpec);
  ASSERT_EQ(Run({"submit", path}), kExitOk) << err_.str();
  v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &job).ok())
      << out_.str();
  EXPECT_EQ(job.id(), "job-1");
  EXPECT_EQ(job.state(), v1::QUEUED);
}

TEST_F(CommandsTest, BadSpecNamesTheFieldAndExits2WithoutConnecting) {
  const std::string path = WriteTempFile(
      "bad.json",
      R"({"name": "x", "world_size": 0, "mlp": {"input_dim": 1, "output_dim": 1,
          "batch_size": 1}, "optimizer": {"kind": "sgd", "hyper_parameters":
          {"lr": 0.1}}, "steps": 1})");
  EXPECT_EQ(Run({"submit", path}), kExitUsage);
  EXPECT_THAT(err_.str(), AllOf(StartsWith("pshardctl: invalid job spec "),
                                HasSubstr("world_size"), EndsWith("\n")));
  const std::string err = err_.str();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_THAT(out_.str(), IsEmpty());
  EXPECT_EQ(connects_, 0);
  EXPECT_EQ(NumJobs(), 0u);
}

TEST_F(CommandsTest, UnknownFieldIsRejected) {
  const std::string path = WriteTempFile("typo.json", R"({"name": "x", "wrld_size": 2})");
  EXPECT_EQ(Run({"submit", path}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("wrld_size"));
}

TEST_F(CommandsTest, MissingSpecFileExits2) {
  EXPECT_EQ(Run({"submit", "/nonexistent/job.json"}), kExitUsage);
  EXPECT_EQ(err_.str(),
            "pshardctl: cannot read job spec /nonexistent/job.json: no such "
            "file\n");
}

TEST_F(CommandsTest, SpecPathThatIsADirectoryExits2) {
  const std::string dir = ::testing::TempDir();
  EXPECT_EQ(Run({"submit", dir}), kExitUsage);
  EXPECT_EQ(err_.str(), absl::StrCat("pshardctl: cannot read job spec ", dir,
                                     ": is a directory\n"));
  EXPECT_EQ(connects_, 0);
}

// The coordinator accepts every spec pshardctl's own check passes, so its
// errors are injected on the channel.
TEST_F(CommandsTest, ServerInvalidArgumentExits2OtherErrorsExit1) {
  const std::string path = WriteTempFile("ok.json", kValidSpec);
  coordinator_->FailNextCall(
      "SubmitJob", absl::InvalidArgumentError("world_size: too big here"));
  EXPECT_EQ(Run({"submit", path}), kExitUsage);
  EXPECT_EQ(err_.str(), "pshardctl: SubmitJob: world_size: too big here\n");

  coordinator_->FailNextCall(
      "SubmitJob", absl::ResourceExhaustedError("queue full\nsecond line"));
  EXPECT_EQ(Run({"submit", path}), kExitError);
  EXPECT_EQ(err_.str(), "pshardctl: SubmitJob: queue full second line\n");
  EXPECT_EQ(coordinator_->rpc_log().calls("SubmitJob"), 2);
  EXPECT_EQ(NumJobs(), 0u);
}

TEST_F(CommandsTest, SubmitSendsARandomRequestIdPerInvocation) {
  const std::string path = WriteTempFile("ok.json", kValidSpec);
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(Run({"submit", path}), kExitOk) << err_.str();
    auto request = coordinator_->rpc_log().LastRequest<v1::SubmitJobRequest>(
        "SubmitJob");
    ASSERT_TRUE(request.has_value());
    EXPECT_THAT(request->request_id(),
                ::testing::MatchesRegex("pshardctl-[0-9a-f]{32}"));
    ids.push_back(request->request_id());
  }
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_EQ(NumJobs(), 2u);  // two invocations, two jobs
  ASSERT_OK_AND_ASSIGN(v1::Job job, coordinator_->GetJob("job-2"));
  EXPECT_EQ(job.request_id(), ids[1]);
}

TEST_F(CommandsTest, SubmitRetriesAnUnavailableCoordinatorWithTheSameId) {
  const std::string path = WriteTempFile("ok.json", kValidSpec);
  coordinator_->FailNextCall("SubmitJob",
                             absl::UnavailableError("connection reset"));
  ASSERT_EQ(Run({"submit", path}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "job-1\n");
  EXPECT_EQ(coordinator_->rpc_log().calls("SubmitJob"), 2);
  EXPECT_EQ(NumJobs(), 1u);
}

TEST_F(CommandsTest, SubmitWithAFixedRequestIdIsIdempotent) {
  const std::string path = WriteTempFile("ok.json", kValidSpec);
  options_.request_id = "train-2026-12-04";
  ASSERT_EQ(Run({"submit", path}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "job-1\n");
  // The Kubernetes Job's pod ran again: the same job, not a second one.
  ASSERT_EQ(Run({"submit", path}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "job-1\n");
  EXPECT_EQ(NumJobs(), 1u);
  auto request =
      coordinator_->rpc_log().LastRequest<v1::SubmitJobRequest>("SubmitJob");
  ASSERT_TRUE(request.has_value());
  EXPECT_EQ(request->request_id(), "train-2026-12-04");
  // Another spec under the same id is refused, naming the first job.
  const std::string other = WriteTempFile(
      "other.json", absl::StrReplaceAll(kValidSpec, {{"\"steps\": 5",
                                                      "\"steps\": 6"}}));
  EXPECT_EQ(Run({"submit", other}), kExitError);
  EXPECT_THAT(err_.str(), HasSubstr("request_id train-2026-12-04 was used for "
                                    "job job-1 with a different spec"));
  // A malformed id is the user's mistake.
  options_.request_id = "not ok";
  EXPECT_EQ(Run({"submit", path}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("request_id"));
  EXPECT_EQ(NumJobs(), 1u);
}

TEST_F(CommandsTest, OnlySubmitTakesRequestId) {
  EXPECT_OK(CheckFlagsApply("submit", {"request_id"}));
  EXPECT_THAT(CheckFlagsApply("list", {"request_id"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("list does not take --request_id")));
  EXPECT_THAT(CommandHelp("submit"), HasSubstr("--request_id=ID"));
}

TEST_F(CommandsTest, TimeoutsThatAreNotPositiveAreRefusedBeforeConnecting) {
  options_.rpc_timeout = absl::Seconds(-5);
  EXPECT_EQ(Run({"list"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--rpc_timeout: must be positive, got "
                                    "-5s"));
  options_.rpc_timeout = absl::Seconds(30);
  options_.connect_timeout = absl::ZeroDuration();
  EXPECT_EQ(Run({"workers"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--connect_timeout: must be positive"));
  options_.connect_timeout = absl::Seconds(5);
  options_.watch_timeout = absl::Milliseconds(-1);
  EXPECT_EQ(Run({"watch", "job-1"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--watch_timeout: must be positive"));
  EXPECT_EQ(connects_, 0);
  options_.watch_timeout = absl::InfiniteDuration();  // waits for as long
  EXPECT_EQ(Run({"list"}), kExitOk) << err_.str();
}

TEST_F(CommandsTest, UsageErrorsExit2) {
  EXPECT_EQ(Run({"frobnicate"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("unknown command \"frobnicate\""));
  EXPECT_EQ(Run({"get"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("missing JOB"));
  EXPECT_EQ(Run({"list", "extra"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("unexpected argument \"extra\""));
  options_.states = "running,sleepy";
  EXPECT_EQ(Run({"list"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("sleepy"));
  EXPECT_EQ(connects_, 0);
}

TEST_F(CommandsTest, GetUnknownJobExits1NamingIt) {
  EXPECT_EQ(Run({"get", "job-99"}), kExitError);
  EXPECT_EQ(err_.str(), "pshardctl: GetJob: no job job-99\n");
}

TEST_F(CommandsTest, GetShowsTheJob) {
  const v1::Job failed = FailedJob("rank 1 lost");
  const std::string id = failed.id();
  EXPECT_EQ(Run({"get", id}), kExitOk);
  EXPECT_THAT(out_.str(), AllOf(HasSubstr("state:      FAILED"),
                                HasSubstr("reason:     " + failed.reason()),
                                HasSubstr("name:       test-job")));
  options_.output = OutputFormat::kJson;
  EXPECT_EQ(Run({"get", id}), kExitOk);
  v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &job).ok());
  EXPECT_EQ(job.reason(), failed.reason());
}

TEST_F(CommandsTest, ListFiltersByState) {
  // a RUNNING on the two workers, c CANCELLED, b QUEUED behind a.
  const std::vector<v1::RunJobDirective> ranks = RunningJob();
  ASSERT_EQ(ranks.size(), 2u);
  const std::string a = ranks[0].job_id();
  const std::string c = AddJob();
  ASSERT_OK(coordinator_->CancelJob(c, "").status());
  const std::string b = AddJob();
  options_.states = "Running, queued";
  EXPECT_EQ(Run({"list"}), kExitOk) << err_.str();
  std::optional<v1::ListJobsRequest> asked =
      coordinator_->rpc_log().LastRequest<v1::ListJobsRequest>("ListJobs");
  ASSERT_TRUE(asked.has_value());
  EXPECT_THAT(asked->states(), ElementsAre(v1::RUNNING, v1::QUEUED));
  const std::vector<std::string> lines =
      absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << out_.str();
  EXPECT_THAT(lines[0], StartsWith("ID "));
  EXPECT_THAT(lines[1], AllOf(StartsWith(b), HasSubstr("QUEUED")));
  EXPECT_THAT(lines[2], AllOf(StartsWith(a), HasSubstr("RUNNING")));

  options_.states = "succeeded";
  options_.output = OutputFormat::kJson;
  EXPECT_EQ(Run({"list"}), kExitOk);
  v1::ListJobsResponse response;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(out_.str(), &response).ok());
  EXPECT_EQ(response.jobs_size(), 0);
}

TEST_F(CommandsTest, ShardsBeforeAssignmentExits1) {
  const std::string id = AddJob();
  EXPECT_EQ(Run({"shards", id}), kExitError);
  EXPECT_THAT(err_.str(), HasSubstr(id + " has no assignment yet (QUEUED)"));
}

TEST_F(CommandsTest, ShardsShowsTheTable) {
  const std::vector<v1::RunJobDirective> ranks = RunningJob();
  ASSERT_EQ(ranks.size(), 2u);
  const std::string id = ranks[0].job_id();
  EXPECT_EQ(Run({"shards", id}), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(),
              AllOf(HasSubstr("BUCKET"), HasSubstr("4.0 MiB"),
                    HasSubstr("RANK  WORKER"),
                    HasSubstr("policy balanced  imbalance 1.000  epoch 1")));
  options_.output = OutputFormat::kJson;
  EXPECT_EQ(Run({"shards", id}), kExitOk);
  v1::ShardAssignment a;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &a).ok());
  EXPECT_EQ(a.buckets_size(), 4);
}

TEST_F(CommandsTest, WorkersListsThePool) {
  ASSERT_OK_AND_ASSIGN(const std::string idle,
                       coordinator_->RegisterWorker("n"));
  ASSERT_OK_AND_ASSIGN(const std::string lost,
                       coordinator_->RegisterWorker("m"));
  // Both fall silent for longer than the timeout; only "n" comes back.
  coordinator_->AdvanceAndTick(coordinator_->options().worker_timeout +
                               absl::Seconds(1));
  ASSERT_OK_AND_ASSIGN(const std::string again,
                       coordinator_->RegisterWorker("n"));
  EXPECT_EQ(again, idle);
  EXPECT_EQ(Run({"workers"}), kExitOk);
  EXPECT_THAT(out_.str(), AllOf(HasSubstr(idle), Not(HasSubstr(lost))));
  options_.include_lost = true;
  EXPECT_EQ(Run({"workers"}), kExitOk);
  EXPECT_THAT(out_.str(), AllOf(HasSubstr(idle), HasSubstr("LOST")));
}

TEST_F(CommandsTest, WorkersAndListFollowEveryPageOrStopAtTheLimit) {
  ASSERT_OK(coordinator_->RegisterSimulatedWorkers(1203).status());
  options_.output = OutputFormat::kJson;
  EXPECT_EQ(Run({"workers"}), kExitOk) << err_.str();
  v1::ListWorkersResponse all;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &all).ok());
  ASSERT_EQ(all.workers_size(), 1203);  // two pages of 1000 and 203
  EXPECT_EQ(all.workers(1202).id(), "w-1203");
  EXPECT_EQ(coordinator_->rpc_log().calls("ListWorkers"), 2);
  options_.limit = 5;
  EXPECT_EQ(Run({"workers"}), kExitOk) << err_.str();
  v1::ListWorkersResponse five;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &five).ok());
  EXPECT_EQ(five.workers_size(), 5);
  EXPECT_EQ(coordinator_->rpc_log().calls("ListWorkers"), 3);
  for (int i = 0; i < 7; ++i) AddJob();
  options_.limit = 3;
  EXPECT_EQ(Run({"list"}), kExitOk) << err_.str();
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 3);
  options_.limit = -1;
  EXPECT_EQ(Run({"workers"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--limit: must be >= 0"));
}

TEST_F(CommandsTest, DrainAndUndrain) {
  v1::JobSpec spec = ValidSpec();
  spec.set_world_size(1);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::RunJobDirective> ranks,
                       coordinator_->StartJob(spec));
  ASSERT_EQ(ranks.size(), 1u);
  const std::string job = ranks[0].job_id();
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo w, coordinator_->GetWorker("sim-0"));
  const std::string who = absl::StrCat(w.id(), " (sim-0)");
  EXPECT_EQ(Run({"drain", "sim-0"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), absl::StrCat(who, " DRAINING: runs ", job,
                                     " (rank 0) until it ends, then no new "
                                     "job\n"));
  EXPECT_EQ(Run({"workers"}), kExitOk);
  EXPECT_THAT(out_.str(), AllOf(HasSubstr("DRAINING"), HasSubstr(job)));
  // --wait polls, a poll interval apart on pshardctl's clock, until the job
  // has ended: two polls while it runs, then the job ends, then one more.
  options_.wait = true;
  options_.drain_poll = absl::Milliseconds(10);
  int code = -1;
  std::thread drain([&] { code = Run({"drain", w.id()}); });
  const RpcLog& log = coordinator_->rpc_log();
  for (int polls = 1; polls <= 2; ++polls) {
    ASSERT_TRUE(cli_clock_.WaitForWaiters(1, absl::Seconds(20)));
    cli_clock_.Advance(options_.drain_poll);
    ASSERT_TRUE(log.WaitForCalls("GetWorker", polls, absl::Seconds(20)));
  }
  ASSERT_TRUE(cli_clock_.WaitForWaiters(1, absl::Seconds(20)));
  ASSERT_OK(coordinator_->ReportLayout(ranks, kBuckets));
  ASSERT_OK(coordinator_->ReportResult(ranks[0], absl::OkStatus(), 5));
  cli_clock_.Advance(options_.drain_poll);
  drain.join();
  EXPECT_EQ(code, kExitOk) << err_.str();
  EXPECT_THAT(out_.str(), EndsWith(absl::StrCat(who,
                                                " DRAINING: no job running, "
                                                "takes no new one\n")));
  EXPECT_EQ(log.calls("GetWorker"), 3);
  options_.wait = false;
  EXPECT_EQ(Run({"undrain", w.id()}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), who + " IDLE: schedulable\n");
  options_.output = OutputFormat::kJson;
  EXPECT_EQ(Run({"drain", w.id()}), kExitOk) << err_.str();
  v1::WorkerInfo info;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &info).ok());
  EXPECT_TRUE(info.drain_requested());
  // Bad input.
  EXPECT_EQ(Run({"drain", "pod-x"}), kExitError);
  EXPECT_THAT(err_.str(), HasSubstr("no worker \"pod-x\""));
  EXPECT_EQ(Run({"drain"}), kExitUsage);
  EXPECT_EQ(Run({"undrain", "a", "b"}), kExitUsage);
  options_.wait_timeout = absl::ZeroDuration();
  EXPECT_EQ(Run({"drain", w.id()}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--wait_timeout: must be positive, got 0"));
}

TEST_F(CommandsTest, DrainWaitGivesUpAfterTheTimeout) {
  v1::JobSpec spec = ValidSpec();
  spec.set_world_size(1);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::RunJobDirective> ranks,
                       coordinator_->StartJob(spec));
  ASSERT_EQ(ranks.size(), 1u);
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo w, coordinator_->GetWorker("sim-0"));
  options_.wait = true;
  options_.drain_poll = absl::Milliseconds(10);
  options_.wait_timeout = absl::Milliseconds(50);
  // pshardctl's polls pass at once: the job never ends.
  cli_clock_.set_advance_on_sleep(true);
  EXPECT_EQ(Run({"drain", w.id()}), kExitError);
  EXPECT_THAT(err_.str(), HasSubstr(absl::StrCat(w.id(), " still runs ",
                                                 ranks[0].job_id(),
                                                 " after 50ms")));
}

TEST_F(CommandsTest, CancelPassesTheReason) {
  const std::string id = AddJob();
  options_.reason = "not needed";
  EXPECT_EQ(Run({"cancel", id}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), absl::StrCat(id, " CANCELLED\n"));
  std::optional<v1::CancelJobRequest> asked =
      coordinator_->rpc_log().LastRequest<v1::CancelJobRequest>("CancelJob");
  ASSERT_TRUE(asked.has_value());
  EXPECT_EQ(asked->reason(), "not needed");
  ASSERT_OK_AND_ASSIGN(v1::Job job, coordinator_->GetJob(id));
  EXPECT_THAT(job.reason(), HasSubstr("not needed"));
  // Cancelling again: FailedPrecondition from the server, exit 1.
  EXPECT_EQ(Run({"cancel", id}), kExitError);
  EXPECT_THAT(err_.str(), HasSubstr("already ended"));
}

TEST_F(CommandsTest, WatchAFinishedJobReplaysItsLog) {
  const std::vector<v1::RunJobDirective> ranks = RunningJob();
  ASSERT_EQ(ranks.size(), 2u);
  const std::string id = ranks[0].job_id();
  v1::JobProgress p;
  p.set_step(5);
  p.set_total_steps(5);
  p.set_loss(0.5);
  ASSERT_OK(coordinator_->ReportProgress(ranks[0], p).status());
  ASSERT_OK(coordinator_->ReportResult(ranks[0], absl::OkStatus(), 5,
                                       "/out/params.safetensors"));
  ASSERT_OK(coordinator_->ReportResult(ranks[1], absl::OkStatus(), 5));
  const std::string running = ReasonOf(id, v1::RUNNING);
  const std::string done = ReasonOf(id, v1::SUCCEEDED);
  ASSERT_FALSE(running.empty());
  ASSERT_FALSE(done.empty());
  EXPECT_EQ(Run({"watch", id}), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(),
              AllOf(HasSubstr("STARTING -> RUNNING: " + running + "\n"),
                    HasSubstr("step 5/5 (100%)  loss 0.5\n"),
                    HasSubstr("RUNNING -> SUCCEEDED: " + done + "\n"),
                    HasSubstr(absl::StrCat(id, " SUCCEEDED")),
                    HasSubstr("final parameters: /out/params.safetensors\n")));
  EXPECT_THAT(out_.str(), Not(HasSubstr("\r")));
}

TEST_F(CommandsTest, WatchAFailedJobExits1) {
  const v1::Job failed = FailedJob("rank 1 (w-2) lost");
  EXPECT_EQ(Run({"watch", failed.id()}), kExitError);
  EXPECT_THAT(out_.str(),
              HasSubstr(absl::StrCat(failed.id(), " FAILED: ", failed.reason())));
}

TEST_F(CommandsTest, SubmitWatchFollowsALiveJobWithABarOnATerminal) {
  ASSERT_OK(coordinator_->RegisterSimulatedWorkers(2).status());
  options_.watch = true;
  const std::string path = WriteTempFile("ok.json", kValidSpec);
  int code = -1;
  std::thread submit([&] { code = Run({"submit", path}, /*tty=*/true); });
  // Once pshardctl follows the job, the simulated workers run it.
  ASSERT_TRUE(
      coordinator_->rpc_log().WaitForCalls("WatchJob", 1, absl::Seconds(20)));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::RunJobDirective> ranks,
                       coordinator_->TakeJob("job-1", 2));
  ASSERT_OK(coordinator_->ReportLayout(ranks, kBuckets));
  for (int step = 1; step <= 5; ++step) {
    v1::JobProgress p;
    p.set_step(step);
    p.set_total_steps(5);
    p.set_loss(1.0 / step);
    ASSERT_OK(coordinator_->ReportProgress(ranks[0], p).status());
  }
  ASSERT_OK(coordinator_->ReportResult(ranks[0], absl::OkStatus(), 5));
  ASSERT_OK(coordinator_->ReportResult(ranks[1], absl::OkStatus(), 5));
  submit.join();
  EXPECT_EQ(code, kExitOk) << err_.str();
  EXPECT_THAT(out_.str(),
              AllOf(StartsWith("job-1\n"), HasSubstr("\r\033[K[######"),
                    HasSubstr("5/5  100%"), HasSubstr("job-1 SUCCEEDED")));
}

TEST_F(CommandsTest, WatchJsonIsOneEventPerLine) {
  const std::string id = AddJob();
  ASSERT_OK(coordinator_->CancelJob(id, "user").status());
  options_.output = OutputFormat::kJson;
  EXPECT_EQ(Run({"watch", id}), kExitError);
  const std::vector<std::string> lines =
      absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << out_.str();
  v1::JobEvent event;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(lines[1], &event).ok());
  EXPECT_EQ(event.state_change().to(), v1::CANCELLED);
  EXPECT_EQ(event.sequence(), 2);
}

TEST_F(CommandsTest, WatchIsInterruptedByCancellation) {
  const std::vector<v1::RunJobDirective> ranks = RunningJob();
  ASSERT_EQ(ranks.size(), 2u);
  int code = -1;
  std::thread watcher([&] { code = Run({"watch", ranks[0].job_id()}); });
  // The stream is open once its first event has arrived; then interrupt.
  ASSERT_TRUE(coordinator_->rpc_log().WaitForReceived("WatchJob", 1,
                                                      absl::Seconds(10)));
  cancel_.Cancel();
  watcher.join();
  EXPECT_EQ(code, kExitInterrupted);
  EXPECT_EQ(err_.str(), "pshardctl: interrupted\n");
}

TEST(ProgressRendererTest, TerminalBarNeverGoesBackwardsNorOutlivesTheJob) {
  std::ostringstream out;
  ProgressRenderer renderer(out, /*tty=*/true, OutputFormat::kTable, 10);
  v1::JobProgress p;
  p.set_step(6);
  renderer.OnLatestProgress(p);
  EXPECT_THAT(out.str(), HasSubstr("6/10  60%"));
  // The stream replays an older step: not drawn.
  v1::JobEvent old_event;
  old_event.mutable_progress()->set_step(3);
  renderer.OnEvent(old_event);
  EXPECT_THAT(out.str(), Not(HasSubstr("3/10")));
  v1::JobEvent done;
  done.mutable_state_change()->set_from(v1::RUNNING);
  done.mutable_state_change()->set_to(v1::SUCCEEDED);
  renderer.OnEvent(done);
  EXPECT_THAT(out.str(), EndsWith("\nRUNNING -> SUCCEEDED\n"));
  // A poll that raced the end draws nothing more.
  p.set_step(9);
  renderer.OnLatestProgress(p);
  EXPECT_THAT(out.str(), EndsWith("RUNNING -> SUCCEEDED\n"));
}

TEST(ProgressRendererTest, PlainModeIgnoresPolls) {
  std::ostringstream out;
  ProgressRenderer renderer(out, /*tty=*/false, OutputFormat::kTable, 10);
  v1::JobProgress p;
  p.set_step(6);
  renderer.OnLatestProgress(p);
  EXPECT_THAT(out.str(), IsEmpty());
  v1::JobEvent event;
  *event.mutable_progress() = p;
  renderer.OnEvent(event);
  EXPECT_EQ(out.str(), "step 6/10 (60%)\n");
}

TEST(ProgressRendererTest, PrintsRestartsAndCheckpoints) {
  std::ostringstream out;
  ProgressRenderer renderer(out, /*tty=*/false, OutputFormat::kTable, 10,
                            /*max_restarts=*/2);
  v1::JobEvent restart;
  restart.mutable_restart()->set_restart(1);
  restart.mutable_restart()->set_epoch(2);
  restart.mutable_restart()->set_world_size(2);
  restart.mutable_restart()->set_cause("rank 1 (worker w-2) lost");
  renderer.OnEvent(restart);
  v1::JobEvent checkpoint;
  checkpoint.mutable_checkpoint()->set_step(5);
  checkpoint.mutable_checkpoint()->set_state(v1::CheckpointRecord::FAILED);
  checkpoint.mutable_checkpoint()->set_reason("disk full");
  renderer.OnEvent(checkpoint);
  EXPECT_EQ(out.str(),
            "restart 1 of 2: epoch 2 on 2 workers from step 0: rank 1 "
            "(worker w-2) lost\n"
            "checkpoint step 5 FAILED: disk full\n");
}

using security::Plaintext;

TEST(ConnectTest, RefusedConnectionFailsAtOnce) {
  const absl::Time start = absl::Now();
  // Port 1 on loopback: nothing serves it, the connection is refused.
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client =
      CoordinatorClient::Connect("127.0.0.1:1", Plaintext(), absl::Seconds(30),
                                 absl::Seconds(1));
  // Not after the 30 s of --connect_timeout.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_THAT(client, StatusIs(absl::StatusCode::kUnavailable,
                               HasSubstr("cannot reach the coordinator at "
                                         "127.0.0.1:1: the connection failed "
                                         "at once")));
  EXPECT_EQ(ExitCodeFor(client.status()), kExitError);
}

TEST(ConnectTest, BadTlsSettingsAreAnInputError) {
  security::TransportSecurity s;
  s.ca_file = "/nonexistent/ca.crt";
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client =
      CoordinatorClient::Connect("127.0.0.1:1", s, absl::Seconds(1),
                                 absl::Seconds(1));
  EXPECT_THAT(client, StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("--tls_ca")));
  EXPECT_EQ(ExitCodeFor(client.status()), kExitUsage);
}

// A loopback port that accepts TCP connections (into the kernel's backlog)
// and never speaks gRPC: connecting and calling both wait out their time.
class SilentPort {
 public:
  SilentPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (fd_ < 0 ||
        bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
            0 ||
        listen(fd_, 16) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) !=
            0) {
      ADD_FAILURE() << "cannot listen on loopback";
      return;
    }
    target_ = absl::StrCat("127.0.0.1:", ntohs(address.sin_port));
  }
  ~SilentPort() {
    if (fd_ >= 0) close(fd_);
  }
  const std::string& target() const { return target_; }

 private:
  int fd_ = -1;
  std::string target_;
};

TEST(ConnectTest, SilentPortTimesOutNamingTheWait) {
  SilentPort port;
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client =
      CoordinatorClient::Connect(port.target(), Plaintext(),
                                 absl::Milliseconds(500), absl::Seconds(1));
  EXPECT_THAT(client,
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr(absl::StrCat("cannot reach the coordinator at ",
                                              port.target(), " within 500ms"))));
}

TEST(ConnectTest, RequestDeadlineNamesTheCoordinatorAndTheTime) {
  SilentPort port;
  CoordinatorClient client(
      grpc::CreateChannel(port.target(), grpc::InsecureChannelCredentials()),
      port.target(), absl::Milliseconds(300));
  // gRPC's own "Deadline Exceeded" is not what the user sees.
  EXPECT_THAT(client.GetJob("job-1"),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       absl::StrCat("GetJob: the coordinator at ",
                                    port.target(),
                                    " did not answer within 300ms")));
}

TEST_F(CommandsTest, WatchTimeoutSaysWhereTheJobWas) {
  const std::string id = AddJob();  // QUEUED: no workers.
  options_.watch_timeout = absl::Milliseconds(300);
  EXPECT_EQ(Run({"watch", id}), kExitError);
  EXPECT_EQ(err_.str(), absl::StrCat("pshardctl: watch ", id,
                                     ": still QUEUED after "
                                     "--watch_timeout=300ms\n"));
}

TEST(CheckFlagsApplyTest, RefusesAFlagTheCommandDoesNotTake) {
  EXPECT_OK(CheckFlagsApply("cancel", {"reason", "coordinator", "output"}));
  EXPECT_THAT(
      CheckFlagsApply("cancel", {"reason", "limit"}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               StartsWith("cancel does not take --limit (its flags: "
                          "--output, --reason, --coordinator, ")));
  EXPECT_EQ(ExitCodeFor(CheckFlagsApply("get", {"watch"})), kExitUsage);
  // export reads a checkpoint: no coordinator.
  EXPECT_THAT(CheckFlagsApply("export", {"coordinator"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("export does not take --coordinator")));
  EXPECT_OK(CheckFlagsApply("local", {"workers", "watch_timeout", "output"}));
  EXPECT_THAT(CheckFlagsApply("local", {"coordinator"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("local does not take --coordinator")));
}

TEST(CheckFlagsApplyTest, EveryFlagOfACommandIsInItsHelp) {
  for (const char* cmd : {"submit", "list", "get", "watch", "logs", "shards",
                          "checkpoints", "export", "workers", "drain",
                          "undrain", "cancel", "local"}) {
    const std::vector<std::string> flags = CommandFlags(cmd);
    EXPECT_THAT(flags, Not(IsEmpty())) << cmd;
    for (const std::string& flag : flags) {
      EXPECT_THAT(CommandHelp(cmd), HasSubstr("--" + flag)) << cmd;
    }
  }
}

TEST(ExitCodeTest, Mapping) {
  EXPECT_EQ(ExitCodeFor(absl::OkStatus()), 0);
  EXPECT_EQ(ExitCodeFor(absl::InvalidArgumentError("x")), 2);
  EXPECT_EQ(ExitCodeFor(absl::NotFoundError("x")), 1);
  EXPECT_EQ(ExitCodeFor(absl::CancelledError("x")), 130);
}

TEST(HelpTest, EveryCommandHasHelp) {
  for (const char* cmd : {"submit", "list", "get", "watch", "shards", "workers",
                          "cancel", "local"}) {
    EXPECT_THAT(CommandHelp(cmd), StartsWith(absl::StrCat("usage: pshardctl ", cmd)));
    EXPECT_THAT(UsageText(), HasSubstr(cmd));
  }
  EXPECT_THAT(CommandHelp("nope"), IsEmpty());
  EXPECT_THAT(CommandHelp("list"), HasSubstr("--state"));
  EXPECT_THAT(CommandHelp("local"), HasSubstr("--workers"));
}

}  // namespace
}  // namespace pshard::cli
