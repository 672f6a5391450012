// `pshardctl logs` against the real coordinator (InProcessCoordinator, with
// simulated workers) and a real worker status service (WorkerStatusService
// over a ProgramLogStreamer and ProgramLog files in a temp dir) on loopback,
// which every simulated worker registers as its address. Following a running
// program is covered by tests/program:program_e2e_test (real processes) and,
// on a FakeClock, by worker/runtime:program_log_stream_test.
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "common/fake_clock.h"
#include "common/job_spec.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/in_process_coordinator.h"
#include "tests/testing/subprocess.h"
#include "worker/runtime/program_log.h"
#include "worker/runtime/program_log_stream.h"
#include "worker/runtime/worker_status_service.h"

namespace pshard::cli {
namespace {

using ::pshard::testing::InProcessCoordinator;
using ::pshard::testing::InProcessCoordinatorOptions;
using ::pshard::testing::MakeTempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kProgramSpec[] = R"json({
  "name": "program-job",
  "world_size": 2,
  "program": {"argv": ["python3", "train.py"]}
})json";

constexpr char kMlpSpec[] = R"json({
  "name": "mlp-job",
  "world_size": 2,
  "mlp": {"input_dim": 4, "hidden_dims": [8], "output_dim": 2, "batch_size": 16},
  "optimizer": {"kind": "adam"},
  "steps": 5
})json";

class LogsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cli_clock_.set_advance_on_sleep(true);
    options_.security.insecure = true;  // the simulated worker is plaintext
    StartCluster(/*worker_address=*/"");
  }

  void TearDown() override {
    if (worker_server_ != nullptr) worker_server_->Shutdown();
  }

  // The coordinator, with every simulated worker registering
  // `worker_address`, or the test's worker status server if that is empty.
  void StartCluster(const std::string& worker_address) {
    log_dir_ = MakeTempDir("logs");
    worker::ProgramLogStreamerOptions log_options;
    log_options.log_dir = log_dir_;
    log_options.worker_name = "worker sim";
    streamer_ = std::make_unique<worker::ProgramLogStreamer>(
        log_options, [](absl::string_view, int) { return false; });
    service_ = std::make_unique<worker::WorkerStatusService>(
        []() -> absl::StatusOr<v1::GetWorkerStatusResponse> {
          return v1::GetWorkerStatusResponse();
        },
        streamer_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    worker_server_ = builder.BuildAndStart();
    ASSERT_NE(worker_server_, nullptr);
    InProcessCoordinatorOptions options;
    options.simulated_worker_address =
        worker_address.empty() ? absl::StrCat("127.0.0.1:", port)
                               : worker_address;
    ASSERT_OK_AND_ASSIGN(coordinator_, InProcessCoordinator::Start(options));
  }

  int Run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    CliIo io{&out_, &err_, false};
    Connector connect = [this]()
        -> absl::StatusOr<std::unique_ptr<CoordinatorClient>> {
      return std::make_unique<CoordinatorClient>(
          coordinator_->Channel(), "the in-process coordinator",
          absl::Seconds(5));
    };
    return RunCommand(args, options_, io, connect, &cancel_, cli_clock_);
  }

  // Writes `text` as rank `rank`'s program output, as the agent does.
  void WriteLog(const std::string& job_id, int rank, const std::string& text) {
    ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<worker::ProgramLog> log,
        worker::ProgramLog::Open(worker::ProgramLogPath(log_dir_, job_id, rank),
                                 1 << 20));
    log->Append(text);
  }

  // A 2-rank program job that ran and SUCCEEDED; its id.
  std::string FinishedProgramJob() {
    absl::StatusOr<std::vector<v1::RunJobDirective>> ranks =
        coordinator_->StartJob(*ParseJobSpecJson(kProgramSpec));
    EXPECT_OK(ranks);
    if (!ranks.ok() || ranks->size() != 2) return "";
    const std::string id = (*ranks)[0].job_id();
    WriteLog(id, 0, "step 1 loss 2.0\nstep 2 loss 1.0\n");
    WriteLog(id, 1, "rank one\nno newline at the end");
    for (const v1::RunJobDirective& rank : *ranks) {
      EXPECT_OK(coordinator_->ReportResult(rank, absl::OkStatus()));
    }
    absl::StatusOr<v1::Job> job = coordinator_->GetJob(id);
    EXPECT_OK(job);
    EXPECT_EQ(job->state(), v1::SUCCEEDED);
    return id;
  }

  std::unique_ptr<InProcessCoordinator> coordinator_;
  std::string log_dir_;
  std::unique_ptr<worker::ProgramLogStreamer> streamer_;
  std::unique_ptr<worker::WorkerStatusService> service_;
  std::unique_ptr<grpc::Server> worker_server_;
  // pshardctl's own waits: at once, on a FakeClock.
  FakeClock cli_clock_;
  CliOptions options_;
  Cancellation cancel_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(LogsTest, EveryRankPrefixedRankAfterRankAfterTheJobEnded) {
  const std::string id = FinishedProgramJob();
  ASSERT_EQ(Run({"logs", id}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(),
            "[rank 0] step 1 loss 2.0\n"
            "[rank 0] step 2 loss 1.0\n"
            "[rank 1] rank one\n"
            "[rank 1] no newline at the end\n");
  EXPECT_THAT(err_.str(), IsEmpty());
}

TEST_F(LogsTest, OneRankIsPrintedAsTheProgramWroteIt) {
  const std::string id = FinishedProgramJob();
  options_.rank = 1;
  ASSERT_EQ(Run({"logs", id}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "rank one\nno newline at the end");
  // Following a rank whose program has exited ends at the end of its file.
  options_.follow = true;
  options_.rank = 0;
  ASSERT_EQ(Run({"logs", id}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "step 1 loss 2.0\nstep 2 loss 1.0\n");
}

TEST_F(LogsTest, AFollowerWaitsForARankItsWorkerHasNotStartedYet) {
  // STARTING: the workers have not opened the ranks' logs (here: never
  // told to run them), so the worker answers NotFound.
  ASSERT_OK_AND_ASSIGN(std::vector<v1::RunJobDirective> ranks,
                       coordinator_->StartJob(*ParseJobSpecJson(kProgramSpec)));
  const std::string id = ranks[0].job_id();
  options_.follow = true;
  options_.rank = 0;
  int code = -1;
  std::thread follower([&] { code = Run({"logs", id}); });
  // The follower asks the coordinator again between tries...
  EXPECT_TRUE(coordinator_->rpc_log().WaitForCalls("GetJob", 3,
                                                   absl::Seconds(30)));
  // ...and reads the log once the rank's program has written it.
  WriteLog(id, 0, "late start\n");
  follower.join();
  EXPECT_EQ(code, kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "late start\n");

  // Once the attempt is over, a missing log is an error again.
  ASSERT_OK(coordinator_->CancelJob(id, "test").status());
  options_.rank = 1;
  EXPECT_EQ(Run({"logs", id}), kExitError);
  EXPECT_THAT(err_.str(), HasSubstr(absl::StrCat("has no log of ", id, " rank 1")));
}

TEST_F(LogsTest, RankOutOfRangeIsBadInput) {
  const std::string id = FinishedProgramJob();
  options_.rank = 2;
  EXPECT_EQ(Run({"logs", id}), kExitUsage);
  EXPECT_EQ(err_.str(),
            absl::StrCat("pshardctl: --rank=2: ", id, " has ranks 0 to 1\n"));
  options_.rank = -2;
  EXPECT_EQ(Run({"logs", id}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--rank: must be >= 0, got -2"));
}

TEST_F(LogsTest, UnknownJobAndBuiltInWorkloadsAndQueuedJobsAreRefused) {
  EXPECT_EQ(Run({"logs", "job-42"}), kExitError);
  EXPECT_THAT(err_.str(), HasSubstr("job-42"));

  ASSERT_OK_AND_ASSIGN(v1::Job mlp,
                       coordinator_->SubmitJob(*ParseJobSpecJson(kMlpSpec)));
  EXPECT_EQ(Run({"logs", mlp.id()}), kExitError);
  EXPECT_THAT(err_.str(),
              AllOf(HasSubstr(mlp.id()), HasSubstr("built-in mlp workload"),
                    HasSubstr("only program jobs have logs")));

  // The mlp job holds no worker (none registered): the program job queues.
  ASSERT_OK_AND_ASSIGN(v1::Job queued,
                       coordinator_->SubmitJob(*ParseJobSpecJson(kProgramSpec)));
  EXPECT_EQ(Run({"logs", queued.id()}), kExitError);
  EXPECT_THAT(err_.str(), HasSubstr(absl::StrCat(
                              queued.id(), " is QUEUED: no rank has started")));
  EXPECT_THAT(out_.str(), IsEmpty());
}

TEST_F(LogsTest, ALogTheWorkerDoesNotHaveNamesRankAndWorker) {
  const std::string id = FinishedProgramJob();
  // Rank 1's file is gone (say, the worker's --log_dir changed).
  ASSERT_EQ(std::remove(worker::ProgramLogPath(log_dir_, id, 1).c_str()), 0);
  EXPECT_EQ(Run({"logs", id}), kExitError);
  EXPECT_THAT(err_.str(),
              AllOf(HasSubstr(absl::StrCat("rank 1 of ", id, " (worker w-")),
                    HasSubstr(absl::StrCat("has no log of ", id, " rank 1"))));
  // Rank 0 came out before rank 1 failed.
  EXPECT_THAT(out_.str(), HasSubstr("[rank 0] step 2 loss 1.0\n"));
}

TEST_F(LogsTest, AnUnreachableWorkerIsNamed) {
  TearDown();
  StartCluster("127.0.0.1:1");  // nothing listens there
  const std::string id = FinishedProgramJob();
  // The refused connection ends the wait at once, not after 30 s.
  options_.connect_timeout = absl::Seconds(30);
  const absl::Time start = absl::Now();
  EXPECT_EQ(Run({"logs", id}), kExitError);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_THAT(err_.str(),
              AllOf(HasSubstr(absl::StrCat("rank 0 of ", id, " (worker w-")),
                    HasSubstr("at 127.0.0.1:1): cannot reach its status "
                              "server: the connection failed at once")));
}

}  // namespace
}  // namespace pshard::cli
