// The plaintext health-only port (--health_listen) through the real
// binaries: a coordinator and a worker under mutual TLS each answer
// grpc.health.v1.Health/Check in plaintext on their health port, and nothing
// else there (a pshard RPC gets UNIMPLEMENTED), while their main ports stay
// TLS-only. The per-service statuses the main servers set are answered there
// (both read one table: common/health_test.cc shows a change on one seen on
// the other). Bad addresses exit 2 naming the flag, and --help lists it.
#include <sys/wait.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pshard/v1/job.grpc.pb.h"
#include "pshard/v1/worker_status.grpc.pb.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"

namespace pshard::testing {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

std::shared_ptr<grpc::Channel> Plaintext(int port) {
  return grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                             grpc::InsecureChannelCredentials());
}

void SetDeadline(grpc::ClientContext* context) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
}

// Health/Check in plaintext: the serving status, or the RPC's error.
absl::StatusOr<HealthCheckResponse::ServingStatus> PlaintextCheck(
    int port, const std::string& service = "") {
  grpc::ClientContext context;
  SetDeadline(&context);
  HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  grpc::Status status =
      Health::NewStub(Plaintext(port))->Check(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        status.error_message());
  }
  return response.status();
}

// The status's name, or the RPC's error (for readable failures).
std::string ServingOrError(
    const absl::StatusOr<HealthCheckResponse::ServingStatus>& status) {
  if (!status.ok()) return status.status().ToString();
  return HealthCheckResponse::ServingStatus_Name(*status);
}

int PortOf(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

class HealthPortE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("health-port");
    ClusterOptions options;
    options.workers = 1;
    options.tls = true;
    options.coordinator_flags = {"--health_listen=127.0.0.1:0",
                                 "--health_port_file=" + dir_ + "/coordinator"};
    options.worker_flags = {"--health_listen=127.0.0.1:0",
                            "--health_port_file=" + dir_ + "/worker-{i}"};
    ASSERT_OK_AND_ASSIGN(cluster_, Cluster::Start(options));
    ASSERT_OK_AND_ASSIGN(coordinator_health_,
                         WaitForPortFile(dir_ + "/coordinator", absl::Seconds(30)));
    ASSERT_OK_AND_ASSIGN(worker_health_,
                         WaitForPortFile(dir_ + "/worker-0", absl::Seconds(30)));
  }

  std::string dir_;
  std::unique_ptr<Cluster> cluster_;
  int coordinator_health_ = 0;
  int worker_health_ = 0;
};

TEST_F(HealthPortE2eTest, CoordinatorAnswersHealthOnlyInPlaintext) {
  EXPECT_EQ(ServingOrError(PlaintextCheck(coordinator_health_)), "SERVING")
      << cluster_->Logs();
  // The per-service statuses the main server sets are there too.
  EXPECT_EQ(ServingOrError(PlaintextCheck(coordinator_health_, "pshard.v1.JobService")), "SERVING");

  // A pshard RPC on the health port: no such service there.
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ListJobsResponse jobs;
  grpc::Status status = v1::JobService::NewStub(Plaintext(coordinator_health_))
                            ->ListJobs(&context, v1::ListJobsRequest(), &jobs);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED)
      << status.error_message();

  // The main port is still TLS only: a plaintext health check fails there.
  EXPECT_FALSE(PlaintextCheck(PortOf(cluster_->address())).ok());
  // ... and answers over TLS as before.
  EXPECT_TRUE(cluster_->Workers(false).ok());
}

TEST_F(HealthPortE2eTest, WorkerAnswersHealthOnlyInPlaintext) {
  EXPECT_EQ(ServingOrError(PlaintextCheck(worker_health_)), "SERVING")
      << cluster_->Logs();
  EXPECT_EQ(ServingOrError(PlaintextCheck(worker_health_, "pshard.v1.WorkerStatus")), "SERVING");

  grpc::ClientContext context;
  SetDeadline(&context);
  v1::GetWorkerStatusResponse response;
  grpc::Status status =
      v1::WorkerStatus::NewStub(Plaintext(worker_health_))
          ->GetStatus(&context, v1::GetWorkerStatusRequest(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED)
      << status.error_message();

  EXPECT_FALSE(PlaintextCheck(PortOf(cluster_->worker_status_address(0))).ok());
  EXPECT_OK(cluster_->WorkerHealth(0));
}

// Runs `binary` with `args` to its exit; (exit code, stdout+stderr).
std::pair<int, std::string> RunToExit(const std::string& binary,
                                const std::vector<std::string>& args) {
  const std::string log = MakeTempDir("run") + "/log";
  std::vector<std::string> argv = {RunfilePath(binary)};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(argv, {}, log);
  if (!p.ok()) return {-1, std::string(p.status().message())};
  absl::StatusOr<int> status = (*p)->Wait(absl::Seconds(60));
  if (!status.ok() || !WIFEXITED(*status)) return {-1, ReadFile(log)};
  return {WEXITSTATUS(*status), ReadFile(log)};
}

TEST(HealthListenFlagTest, BadAddressesExit2NamingTheFlag) {
  const std::string dir = MakeTempDir("bad-health");
  for (const char* bad : {"7072", "0.0.0.0:port", ":7072", "0.0.0.0:99999"}) {
    const std::string flag = absl::StrCat("--health_listen=", bad);
    auto [coordinator_exit, coordinator_out] =
        RunToExit("server/pshard-coordinator",
            {"--insecure", "--listen=127.0.0.1:0", flag,
             "--state_path=" + dir + "/state.db"});
    EXPECT_EQ(coordinator_exit, 2) << bad << ": " << coordinator_out;
    EXPECT_THAT(coordinator_out, HasSubstr("--health_listen")) << bad;
    auto [worker_exit, worker_out] =
        RunToExit("worker/pshard-worker", {"--insecure", "--coordinator=127.0.0.1:1",
                                     "--listen=127.0.0.1:0", flag});
    EXPECT_EQ(worker_exit, 2) << bad << ": " << worker_out;
    EXPECT_THAT(worker_out, HasSubstr("--health_listen")) << bad;
  }
}

TEST(HealthListenFlagTest, HelpListsIt) {
  for (const char* binary : {"server/pshard-coordinator", "worker/pshard-worker"}) {
    auto [code, out] = RunToExit(binary, {"--help"});
    EXPECT_THAT(out, HasSubstr("--health_listen")) << binary;
    EXPECT_THAT(out, HasSubstr("--health_port_file")) << binary;
  }
}

}  // namespace
}  // namespace pshard::testing
