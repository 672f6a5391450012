// pshardctl end to end: a real pshard-coordinator and two real CPU
// pshard-workers on loopback, driven only through the pshardctl binary, the
// way a user drives them.
#include <sys/stat.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "pshard/v1/cluster.pb.h"
#include "pshard/v1/job.pb.h"
#include "tests/cli/pshardctl_runner.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"

namespace pshard {
namespace {

using ::pshard::testing::CliResult;
using ::pshard::testing::Cluster;
using ::pshard::testing::ClusterOptions;
using ::pshard::testing::MakeTempDir;
using ::pshard::testing::RunPshardctl;
using ::pshard::testing::WaitUntil;
using ::pshard::testing::WriteTempFile;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

CliResult RunCli(const std::vector<std::string>& args,
                 absl::Duration timeout = absl::Seconds(60)) {
  return RunPshardctl(args, {}, timeout);
}

std::string MlpSpec(int steps, const std::string& output_dir) {
  return absl::StrCat(R"({
    "name": "e2e-mlp", "world_size": 2, "backend": "gloo",
    "mlp": {"input_dim": 16, "hidden_dims": [32], "output_dim": 4, "batch_size": 32},
    "bucket_cap_mb": 0.001,
    "optimizer": {"kind": "adam", "hyper_parameters": {"lr": 0.01}},
    "steps": )", steps, R"(, "seed": 3, "progress_every": 1,
    "collective_timeout_seconds": 20, "output_dir": ")", output_dir, R"("})");
}

class CliE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions options;
    options.workers = 2;
    // The coordinator's own defaults: this test drives a cluster as a user
    // starts it.
    options.heartbeat_interval = absl::Seconds(1);
    options.worker_timeout = absl::Seconds(5);
    options.worker_name_prefix = "e2e-worker-";
    // Mutual TLS, as a real cluster runs: every command below goes through
    // pshardctl's --tls_ca/--tls_cert/--tls_key.
    options.tls = true;
    absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start(options);
    ASSERT_OK(cluster.status());
    cluster_ = cluster->release();
  }

  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(cluster_, nullptr);
    // Both workers IDLE (back from any earlier test's job), as pshardctl
    // reports them.
    bool ready = WaitUntil(
        [] {
          CliResult r = Cli({"workers", "--output=json"});
          v1::ListWorkersResponse pool;
          if (r.exit_code != 0 ||
              !google::protobuf::util::JsonStringToMessage(r.out, &pool).ok()) {
            return false;
          }
          int idle = 0;
          for (const auto& w : pool.workers()) idle += w.state() == v1::IDLE;
          return idle >= 2;
        },
        absl::Seconds(30));
    ASSERT_TRUE(ready) << "workers did not become IDLE\n" << cluster_->Logs();
  }

  static CliResult Cli(std::vector<std::string> args,
                       absl::Duration timeout = absl::Seconds(60)) {
    for (std::string& flag : cluster_->ClientFlags()) args.push_back(flag);
    return CliWithoutCredentials(std::move(args), timeout);
  }

  static CliResult CliWithoutCredentials(
      std::vector<std::string> args,
      absl::Duration timeout = absl::Seconds(60)) {
    args.push_back("--coordinator=" + cluster_->address());
    return RunCli(args, timeout);
  }

  // Submits a two-rank job that runs until cancelled; returns its id once it
  // is RUNNING.
  static std::string SubmitRunningJob(const std::string& name) {
    const std::string spec = WriteTempFile(name + ".json", absl::StrCat(R"({
      "name": ")", name, R"(", "world_size": 2, "backend": "gloo",
      "synthetic": {"num_parameters": 4096, "tensor_numel": 1024},
      "optimizer": {"kind": "sgd", "hyper_parameters": {"lr": 0.01}},
      "steps": 100000000, "progress_every": 10})"));
    CliResult submit = Cli({"submit", spec});
    EXPECT_EQ(submit.exit_code, 0) << submit.err;
    const std::string id(absl::StripTrailingAsciiWhitespace(submit.out));
    EXPECT_TRUE(WaitUntil([&] { return GetJob(id).state() == v1::RUNNING; },
                          absl::Seconds(30)))
        << "job never RUNNING: " << GetJob(id).reason();
    return id;
  }

  static v1::Job GetJob(const std::string& id) {
    CliResult r = Cli({"get", id, "--output=json"});
    v1::Job job;
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &job).ok())
        << r.out;
    return job;
  }

  static Cluster* cluster_;
};

Cluster* CliE2eTest::cluster_ = nullptr;

TEST_F(CliE2eTest, SubmitWatchShardsSucceedsAndWritesParams) {
  const std::string output_dir = MakeTempDir("output");
  const std::string spec = WriteTempFile("mlp.json", MlpSpec(30, output_dir));

  CliResult submit = Cli({"submit", spec});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  const std::string id(absl::StripTrailingAsciiWhitespace(submit.out));
  EXPECT_THAT(id, StartsWith("job-"));
  // stderr says where the job stands (stdout is the id alone).
  EXPECT_THAT(submit.err, StartsWith(id + ": "));

  CliResult watch = Cli({"watch", id});
  EXPECT_EQ(watch.exit_code, 0) << watch.out << watch.err;
  EXPECT_THAT(watch.out, AllOf(HasSubstr("RUNNING"), HasSubstr("step 30/30 (100%)"),
                               HasSubstr(id + " SUCCEEDED")));

  CliResult shards = Cli({"shards", id});
  ASSERT_EQ(shards.exit_code, 0) << shards.err;
  EXPECT_THAT(shards.out, AllOf(HasSubstr("BUCKET"), HasSubstr("OWNER"),
                                HasSubstr("RANK  WORKER"),
                                HasSubstr("policy balanced"),
                                HasSubstr("imbalance"), HasSubstr("epoch 1")));

  const v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_EQ(job.progress().step(), 30);
  ASSERT_FALSE(job.output_path().empty());
  struct stat st;
  EXPECT_EQ(stat(job.output_path().c_str(), &st), 0) << job.output_path();
  EXPECT_GT(st.st_size, 8);

  CliResult list = Cli({"list", "--state=succeeded"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, AllOf(HasSubstr(id), HasSubstr("e2e-mlp")));

  CliResult workers = Cli({"workers"});
  EXPECT_EQ(workers.exit_code, 0) << workers.err;
  EXPECT_THAT(workers.out, AllOf(HasSubstr("e2e-worker-0"), HasSubstr("e2e-worker-1")));
}

TEST_F(CliE2eTest, SubmitWithWatchExitsZeroOnSuccess) {
  const std::string spec =
      WriteTempFile("mlp.json", MlpSpec(10, MakeTempDir("output")));
  CliResult r = Cli({"submit", "--watch", spec});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, AllOf(StartsWith("job-"), HasSubstr("SUCCEEDED"),
                           HasSubstr("final parameters: ")));
}

TEST_F(CliE2eTest, CancelARunningJob) {
  const std::string id = SubmitRunningJob("e2e-long");
  ASSERT_FALSE(HasFailure());

  CliResult cancel = Cli({"cancel", id, "--reason=e2e test"});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_EQ(cancel.out, id + " CANCELLED\n");

  CliResult watch = Cli({"watch", id});
  EXPECT_EQ(watch.exit_code, 1);
  EXPECT_THAT(watch.out, HasSubstr(id + " CANCELLED"));

  // Cancelling twice is an error from the server (FailedPrecondition): 1.
  CliResult again = Cli({"cancel", id});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.err, StartsWith("pshardctl: "));
}

// drain / undrain through the real binaries: a drained worker keeps its
// running job, takes no new one, and comes back with undrain.
TEST_F(CliE2eTest, DrainKeepsTheJobAndStopsSchedulingUntilUndrain) {
  const std::string id = SubmitRunningJob("e2e-drain");
  ASSERT_FALSE(HasFailure());

  CliResult drain = Cli({"drain", "e2e-worker-0"});  // by name
  EXPECT_EQ(drain.exit_code, 0) << drain.err;
  EXPECT_THAT(drain.out, AllOf(HasSubstr("(e2e-worker-0) DRAINING: runs " + id),
                               HasSubstr("until it ends")));
  CliResult workers = Cli({"workers"});
  EXPECT_EQ(workers.exit_code, 0) << workers.err;
  EXPECT_THAT(workers.out, HasSubstr("DRAINING"));
  // --wait gives up while the job runs; the job is untouched.
  CliResult wait = Cli({"drain", "e2e-worker-0", "--wait", "--wait_timeout=2s"});
  EXPECT_EQ(wait.exit_code, 1);
  EXPECT_THAT(wait.err, HasSubstr("still runs " + id + " after 2s"));
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);

  // Once the job has ended, --wait returns: the worker is drained.
  ASSERT_EQ(Cli({"cancel", id}).exit_code, 0);
  CliResult drained =
      Cli({"drain", "e2e-worker-0", "--wait", "--wait_timeout=60s"});
  EXPECT_EQ(drained.exit_code, 0) << drained.err;
  EXPECT_THAT(drained.out,
              HasSubstr("(e2e-worker-0) DRAINING: no job running, takes no new one"));

  // A two-rank job waits: one worker is schedulable.
  const std::string short_spec =
      WriteTempFile("drain-short.json", MlpSpec(5, MakeTempDir("output")));
  CliResult queued = Cli({"submit", short_spec});
  ASSERT_EQ(queued.exit_code, 0) << queued.err;
  const std::string waiting(absl::StripTrailingAsciiWhitespace(queued.out));
  EXPECT_EQ(GetJob(waiting).state(), v1::QUEUED);
  CliResult undrain = Cli({"undrain", "e2e-worker-0"});
  EXPECT_EQ(undrain.exit_code, 0) << undrain.err;
  EXPECT_THAT(undrain.out, HasSubstr("(e2e-worker-0) "));
  EXPECT_THAT(undrain.out, HasSubstr(": schedulable"));
  CliResult watch = Cli({"watch", waiting});
  EXPECT_EQ(watch.exit_code, 0) << watch.out << watch.err;
  EXPECT_THAT(watch.out, HasSubstr(waiting + " SUCCEEDED"));

  CliResult unknown = Cli({"drain", "no-such-worker"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("no worker \"no-such-worker\""));
}

TEST_F(CliE2eTest, BadSpecNamesTheFieldAndExits2) {
  const std::string spec = WriteTempFile("bad.json", R"({
    "name": "bad", "world_size": 2,
    "mlp": {"input_dim": 16, "output_dim": 4, "batch_size": 0},
    "optimizer": {"kind": "adam"}, "steps": 10})");
  CliResult r = Cli({"submit", spec});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, AllOf(StartsWith("pshardctl: "), HasSubstr("batch_size")));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_THAT(r.out, IsEmpty());
}

TEST_F(CliE2eTest, WithoutTheClustersCaTheConnectionFailsSayingWhatToCheck) {
  // The system's roots do not know the cluster's CA.
  CliResult r = CliWithoutCredentials({"workers", "--connect_timeout=10s"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, AllOf(StartsWith("pshardctl: "),
                           HasSubstr("the TLS handshake failed"),
                           HasSubstr("--tls_ca")));
}

TEST_F(CliE2eTest, TheCaCanComeFromTheEnvironment) {
  const security::TransportSecurity& tls = cluster_->client_security();
  CliResult r = RunPshardctl(
      {"workers", "--coordinator=" + cluster_->address(),
       "--tls_cert=" + tls.certificate_file, "--tls_key=" + tls.key_file},
      {"PSHARD_TLS_CA=" + tls.ca_file});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("e2e-worker-0"));
}

TEST_F(CliE2eTest, TheCoordinatorRefusesAClientWithoutACertificate) {
  CliResult r = CliWithoutCredentials(
      {"workers", "--connect_timeout=10s",
       "--tls_ca=" + cluster_->client_security().ca_file});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--tls_cert/--tls_key"));
}

TEST_F(CliE2eTest, PlaintextAgainstTheTlsCoordinatorFails) {
  CliResult r = CliWithoutCredentials(
      {"workers", "--connect_timeout=10s", "--insecure"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("drop --insecure and pass --tls_ca"));
}

TEST_F(CliE2eTest, InsecureWithATlsFlagIsAUsageError) {
  CliResult r = CliWithoutCredentials(
      {"workers", "--insecure", "--tls_ca=/etc/hostname"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--insecure and --tls_ca contradict"));
}

TEST_F(CliE2eTest, UnknownJobExits1) {
  CliResult r = Cli({"get", "job-does-not-exist"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, AllOf(StartsWith("pshardctl: "),
                           HasSubstr("job-does-not-exist")));
}

}  // namespace
}  // namespace pshard
