#include "cli/commands.h"

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cli/client.h"
#include "cli/fake_coordinator.h"
#include "common/job_spec.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace pshard::cli {
namespace {

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

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override { StartFake(FakeCoordinator::Options()); }

  void StartFake(FakeCoordinator::Options options) {
    fake_ = std::make_unique<FakeCoordinator>(options);
    ASSERT_OK_AND_ASSIGN(address_, fake_->Start());
  }

  // Runs `args` against the fake; returns the exit code.
  int Run(std::vector<std::string> args, bool tty = false) {
    out_.str("");
    err_.str("");
    CliIo io{&out_, &err_, tty};
    return RunCommand(args, options_, io, MakeConnector(), &cancel_);
  }

  Connector MakeConnector() {
    return [this]() -> absl::StatusOr<std::unique_ptr<CoordinatorClient>> {
      ++connects_;
      return CoordinatorClient::Connect(address_, absl::Seconds(5),
                                        absl::Seconds(5));
    };
  }

  v1::JobSpec ValidSpec() { return *ParseJobSpecJson(kValidSpec); }

  std::unique_ptr<FakeCoordinator> fake_;
  std::string address_;
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
  EXPECT_THAT(err_.str(), IsEmpty());
  ASSERT_OK_AND_ASSIGN(v1::Job job, fake_->job("job-1"));
  EXPECT_EQ(job.spec().name(), "test-job");
  EXPECT_EQ(job.spec().world_size(), 2);
}

TEST_F(CommandsTest, SubmitEveryExampleSpec) {
  for (const char* file : {"mlp_adam_2workers.json", "synthetic_benchmark.json",
                           "replay_small.json"}) {
    EXPECT_EQ(Run({"submit", RunfilePath(absl::StrCat("examples/", file))}),
              kExitOk)
        << file << ": " << err_.str();
  }
  EXPECT_EQ(fake_->num_jobs(), 3);
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
  EXPECT_EQ(fake_->num_jobs(), 0);
}

TEST_F(CommandsTest, UnknownFieldIsRejected) {
  const std::string path = WriteTempFile("typo.json", R"({"name": "x", "wrld_size": 2})");
  EXPECT_EQ(Run({"submit", path}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("wrld_size"));
}

TEST_F(CommandsTest, MissingSpecFileExits2) {
  EXPECT_EQ(Run({"submit", "/nonexistent/job.json"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("/nonexistent/job.json"));
}

TEST_F(CommandsTest, ServerInvalidArgumentExits2OtherErrorsExit1) {
  const std::string path = WriteTempFile("ok.json", kValidSpec);
  fake_->FailNextSubmit(absl::InvalidArgumentError("world_size: too big here"));
  EXPECT_EQ(Run({"submit", path}), kExitUsage);
  EXPECT_EQ(err_.str(), "pshardctl: SubmitJob: world_size: too big here\n");

  fake_->FailNextSubmit(absl::ResourceExhaustedError("queue full\nsecond line"));
  EXPECT_EQ(Run({"submit", path}), kExitError);
  EXPECT_EQ(err_.str(), "pshardctl: SubmitJob: queue full second line\n");
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
  const std::string id = fake_->AddJob(ValidSpec());
  fake_->SetState(id, v1::FAILED, "rank 1 lost");
  EXPECT_EQ(Run({"get", id}), kExitOk);
  EXPECT_THAT(out_.str(), AllOf(HasSubstr("state:      FAILED"),
                                HasSubstr("reason:     rank 1 lost"),
                                HasSubstr("name:       test-job")));
  options_.output = OutputFormat::kJson;
  EXPECT_EQ(Run({"get", id}), kExitOk);
  v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &job).ok());
  EXPECT_EQ(job.reason(), "rank 1 lost");
}

TEST_F(CommandsTest, ListFiltersByState) {
  const std::string a = fake_->AddJob(ValidSpec());
  const std::string b = fake_->AddJob(ValidSpec());
  fake_->SetState(b, v1::RUNNING);
  options_.states = "Running, queued";
  EXPECT_EQ(Run({"list"}), kExitOk) << err_.str();
  EXPECT_THAT(fake_->last_list_states(), ElementsAre(v1::RUNNING, v1::QUEUED));
  const std::vector<std::string> lines =
      absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << out_.str();
  EXPECT_THAT(lines[0], StartsWith("ID "));
  EXPECT_THAT(lines[1], AllOf(StartsWith(b), HasSubstr("RUNNING")));
  EXPECT_THAT(lines[2], AllOf(StartsWith(a), HasSubstr("QUEUED")));

  options_.states = "succeeded";
  options_.output = OutputFormat::kJson;
  EXPECT_EQ(Run({"list"}), kExitOk);
  v1::ListJobsResponse response;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(out_.str(), &response).ok());
  EXPECT_EQ(response.jobs_size(), 0);
}

TEST_F(CommandsTest, ShardsBeforeAssignmentExits1) {
  const std::string id = fake_->AddJob(ValidSpec());
  EXPECT_EQ(Run({"shards", id}), kExitError);
  EXPECT_THAT(err_.str(), HasSubstr("no shard assignment yet"));
}

TEST_F(CommandsTest, ShardsShowsTheTable) {
  const std::string id = fake_->AddJob(ValidSpec());
  fake_->SetAssignment(id, FakeCoordinator::MakeAssignment(id, 2, 1));
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
  v1::WorkerInfo w;
  w.set_id("w-1");
  w.set_name("n");
  w.set_state(v1::IDLE);
  fake_->AddWorker(w);
  w.set_id("w-2");
  w.set_state(v1::LOST);
  fake_->AddWorker(w);
  EXPECT_EQ(Run({"workers"}), kExitOk);
  EXPECT_THAT(out_.str(), AllOf(HasSubstr("w-1"), Not(HasSubstr("w-2"))));
  options_.include_lost = true;
  EXPECT_EQ(Run({"workers"}), kExitOk);
  EXPECT_THAT(out_.str(), AllOf(HasSubstr("w-1"), HasSubstr("LOST")));
}

TEST_F(CommandsTest, WorkersAndListFollowEveryPageOrStopAtTheLimit) {
  for (int i = 1; i <= 1203; ++i) {
    v1::WorkerInfo w;
    w.set_id(absl::StrCat("w-", i));
    w.set_name(absl::StrCat("pod-", i));
    w.set_state(v1::IDLE);
    fake_->AddWorker(w);
  }
  options_.output = OutputFormat::kJson;
  EXPECT_EQ(Run({"workers"}), kExitOk) << err_.str();
  v1::ListWorkersResponse all;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &all).ok());
  ASSERT_EQ(all.workers_size(), 1203);  // two pages of 1000 and 203
  EXPECT_EQ(all.workers(1202).id(), "w-1203");
  EXPECT_EQ(fake_->list_calls(), 2);
  options_.limit = 5;
  EXPECT_EQ(Run({"workers"}), kExitOk) << err_.str();
  v1::ListWorkersResponse five;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &five).ok());
  EXPECT_EQ(five.workers_size(), 5);
  EXPECT_EQ(fake_->list_calls(), 3);
  for (int i = 0; i < 7; ++i) fake_->AddJob(ValidSpec());
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
  v1::WorkerInfo w;
  w.set_id("w-1");
  w.set_name("pod-a");
  w.set_state(v1::BUSY);
  w.set_job_id("job-4");
  w.set_rank(0);
  fake_->AddWorker(w);
  EXPECT_EQ(Run({"drain", "pod-a"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(),
            "w-1 (pod-a) DRAINING: runs job-4 (rank 0) until it ends, then no "
            "new job\n");
  EXPECT_EQ(Run({"workers"}), kExitOk);
  EXPECT_THAT(out_.str(), AllOf(HasSubstr("DRAINING"), HasSubstr("job-4")));
  // --wait polls until the job has ended.
  options_.wait = true;
  options_.drain_poll = absl::Milliseconds(10);
  std::thread finisher([&] {
    const absl::Time until = absl::Now() + absl::Seconds(20);
    while (fake_->get_worker_calls() < 2 && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    fake_->FinishWorkerJob("w-1");
  });
  EXPECT_EQ(Run({"drain", "w-1"}), kExitOk) << err_.str();
  finisher.join();
  EXPECT_THAT(out_.str(),
              EndsWith("w-1 (pod-a) DRAINING: no job running, takes no new "
                       "one\n"));
  EXPECT_GE(fake_->get_worker_calls(), 2);
  options_.wait = false;
  EXPECT_EQ(Run({"undrain", "w-1"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "w-1 (pod-a) IDLE: schedulable\n");
  options_.output = OutputFormat::kJson;
  EXPECT_EQ(Run({"drain", "w-1"}), kExitOk) << err_.str();
  v1::WorkerInfo info;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &info).ok());
  EXPECT_TRUE(info.drain_requested());
  // Bad input.
  EXPECT_EQ(Run({"drain", "pod-x"}), kExitError);
  EXPECT_THAT(err_.str(), HasSubstr("no worker \"pod-x\""));
  EXPECT_EQ(Run({"drain"}), kExitUsage);
  EXPECT_EQ(Run({"undrain", "a", "b"}), kExitUsage);
  options_.wait_timeout = absl::ZeroDuration();
  EXPECT_EQ(Run({"drain", "w-1"}), kExitUsage);
}

TEST_F(CommandsTest, DrainWaitGivesUpAfterTheTimeout) {
  v1::WorkerInfo w;
  w.set_id("w-1");
  w.set_name("pod-a");
  w.set_state(v1::BUSY);
  w.set_job_id("job-4");
  fake_->AddWorker(w);
  options_.wait = true;
  options_.drain_poll = absl::Milliseconds(10);
  options_.wait_timeout = absl::Milliseconds(50);
  EXPECT_EQ(Run({"drain", "w-1"}), kExitError);
  EXPECT_THAT(err_.str(), HasSubstr("w-1 still runs job-4 after 50ms"));
}

TEST_F(CommandsTest, CancelPassesTheReason) {
  const std::string id = fake_->AddJob(ValidSpec());
  options_.reason = "not needed";
  EXPECT_EQ(Run({"cancel", id}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), absl::StrCat(id, " CANCELLED\n"));
  EXPECT_EQ(fake_->last_cancel_reason(), "not needed");
  // Cancelling again: FailedPrecondition from the server, exit 1.
  EXPECT_EQ(Run({"cancel", id}), kExitError);
  EXPECT_THAT(err_.str(), HasSubstr("already ended"));
}

TEST_F(CommandsTest, WatchAFinishedJobReplaysItsLog) {
  const std::string id = fake_->AddJob(ValidSpec());
  fake_->SetState(id, v1::RUNNING, "go");
  v1::JobProgress p;
  p.set_step(5);
  p.set_total_steps(5);
  p.set_loss(0.5);
  fake_->AddProgress(id, p);
  fake_->SetOutputPath(id, "/out/params.safetensors");
  fake_->SetState(id, v1::SUCCEEDED, "done");
  EXPECT_EQ(Run({"watch", id}), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(),
              AllOf(HasSubstr("QUEUED -> RUNNING: go\n"),
                    HasSubstr("step 5/5 (100%)  loss 0.5\n"),
                    HasSubstr("RUNNING -> SUCCEEDED: done\n"),
                    HasSubstr(absl::StrCat(id, " SUCCEEDED")),
                    HasSubstr("final parameters: /out/params.safetensors\n")));
  EXPECT_THAT(out_.str(), Not(HasSubstr("\r")));
}

TEST_F(CommandsTest, WatchAFailedJobExits1) {
  const std::string id = fake_->AddJob(ValidSpec());
  fake_->SetState(id, v1::FAILED, "rank 1 (w-2) lost");
  EXPECT_EQ(Run({"watch", id}), kExitError);
  EXPECT_THAT(out_.str(), HasSubstr(absl::StrCat(id, " FAILED: rank 1 (w-2) lost")));
}

TEST_F(CommandsTest, SubmitWatchFollowsALiveJobWithABarOnATerminal) {
  FakeCoordinator::Options options;
  options.auto_run = true;
  StartFake(options);
  options_.watch = true;
  const std::string path = WriteTempFile("ok.json", kValidSpec);
  EXPECT_EQ(Run({"submit", path}, /*tty=*/true), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(),
              AllOf(StartsWith("job-1\n"), HasSubstr("\r\033[K[######"),
                    HasSubstr("5/5  100%"), HasSubstr("job-1 SUCCEEDED")));
}

TEST_F(CommandsTest, WatchJsonIsOneEventPerLine) {
  const std::string id = fake_->AddJob(ValidSpec());
  fake_->SetState(id, v1::CANCELLED, "user");
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
  const std::string id = fake_->AddJob(ValidSpec());
  fake_->SetState(id, v1::RUNNING);
  int code = -1;
  std::thread watcher([&] { code = Run({"watch", id}); });
  // Wait (with a deadline) for the stream to be open, then interrupt.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (fake_->open_watches() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(fake_->open_watches(), 1);
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

TEST(ConnectTest, UnreachableCoordinatorIsAClearError) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client =
      CoordinatorClient::Connect("127.0.0.1:1", absl::Milliseconds(500),
                                 absl::Seconds(1));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(client, StatusIs(absl::StatusCode::kUnavailable,
                               HasSubstr("cannot reach the coordinator at "
                                         "127.0.0.1:1")));
  EXPECT_EQ(ExitCodeFor(client.status()), kExitError);
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
