#include "common/health.h"

#include <chrono>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pshard/v1/job.grpc.pb.h"

namespace pshard {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

std::unique_ptr<Health::Stub> HealthStub(int port) {
  return Health::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
}

// Check with a deadline; the status, or the RPC's error code as a negative
// number.
int CheckStatus(int port, const std::string& service) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  grpc::Status status = HealthStub(port)->Check(&context, request, &response);
  if (!status.ok()) return -static_cast<int>(status.error_code());
  return response.status();
}

TEST(HealthStatusTest, StartsWithTheServerServingAndFollowsSets) {
  HealthStatus status;
  EXPECT_EQ(status.Get(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(status.Get("a"), std::nullopt);
  status.Set("a", false);
  EXPECT_EQ(status.Get("a"), HealthCheckResponse::NOT_SERVING);
  status.SetAll(true);
  EXPECT_EQ(status.Get("a"), HealthCheckResponse::SERVING);
  status.Shutdown();
  EXPECT_EQ(status.Get(""), HealthCheckResponse::NOT_SERVING);
  status.Set("", true);  // ignored once shut down
  EXPECT_EQ(status.Get(""), HealthCheckResponse::NOT_SERVING);
}

TEST(HealthStatusTest, WaitForChangeReturnsAtTheChangeOrTheTimeout) {
  HealthStatus status;
  EXPECT_EQ(status.WaitForChange("", HealthCheckResponse::SERVING,
                                 absl::Milliseconds(10)),
            HealthCheckResponse::SERVING);
  EXPECT_EQ(status.WaitForChange("x", HealthCheckResponse::SERVING,
                                 absl::Seconds(10)),
            HealthCheckResponse::SERVICE_UNKNOWN);
}

TEST(ValidateListenAddressTest, AcceptsHostPortAndNamesTheFlag) {
  EXPECT_OK(ValidateListenAddress("--health_listen", "0.0.0.0:8081"));
  EXPECT_OK(ValidateListenAddress("--health_listen", "localhost:0"));
  EXPECT_OK(ValidateListenAddress("--health_listen", "[::]:8081"));
  for (const char* bad : {"8081", ":8081", "0.0.0.0:", "0.0.0.0:http",
                          "0.0.0.0:70000", "0.0.0.0:-1", ":::8081", "[::1:80"}) {
    absl::Status s = ValidateListenAddress("--health_listen", bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("--health_listen")) << bad;
  }
}

// A TLS-less stand-in for a main server: a pshard service, reflection, and
// the shared table as its health service; plus the health-only server.
class HealthServersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &main_port_);
    UseHealthStatus(builder, status_);
    builder.RegisterService(&main_health_);
    builder.RegisterService(&jobs_);
    main_ = builder.BuildAndStart();
    ASSERT_NE(main_, nullptr);
    ASSERT_OK_AND_ASSIGN(health_only_,
                         HealthOnlyServer::Start("127.0.0.1:0", status_));
  }

  std::shared_ptr<HealthStatus> status_ = std::make_shared<HealthStatus>();
  HealthService main_health_{status_};
  v1::JobService::Service jobs_;  // every method UNIMPLEMENTED: enough here
  std::unique_ptr<grpc::Server> main_;
  int main_port_ = 0;
  std::unique_ptr<HealthOnlyServer> health_only_;
};

TEST_F(HealthServersTest, BothServersAnswerFromTheMainServersStatuses) {
  grpc::HealthCheckServiceInterface* health = main_->GetHealthCheckService();
  ASSERT_NE(health, nullptr);
  health->SetServingStatus("pshard.v1.JobService", true);
  for (int port : {main_port_, health_only_->port()}) {
    EXPECT_EQ(CheckStatus(port, ""), HealthCheckResponse::SERVING);
    EXPECT_EQ(CheckStatus(port, "pshard.v1.JobService"),
              HealthCheckResponse::SERVING);
    EXPECT_EQ(CheckStatus(port, "nope"),
              -static_cast<int>(grpc::StatusCode::NOT_FOUND));
  }
  // What the coordinator does while its state store cannot commit.
  health->SetServingStatus("", false);
  EXPECT_EQ(CheckStatus(health_only_->port(), ""),
            HealthCheckResponse::NOT_SERVING);
  health->SetServingStatus(true);
  EXPECT_EQ(CheckStatus(health_only_->port(), ""), HealthCheckResponse::SERVING);
}

TEST_F(HealthServersTest, HealthOnlyServerServesNothingElse) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  v1::ListJobsResponse response;
  auto jobs = v1::JobService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", health_only_->port()),
      grpc::InsecureChannelCredentials()));
  grpc::Status status =
      jobs->ListJobs(&context, v1::ListJobsRequest(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(HealthServersTest, WatchSendsTheStatusThenEachChange) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(20));
  HealthCheckRequest request;
  auto stub = HealthStub(health_only_->port());
  auto reader = stub->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  main_->GetHealthCheckService()->SetServingStatus("", false);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  main_->GetHealthCheckService()->SetServingStatus("", true);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  context.TryCancel();
}

TEST_F(HealthServersTest, ShutdownOfTheMainServersHealthIsSeenToo) {
  main_->GetHealthCheckService()->Shutdown();
  EXPECT_EQ(CheckStatus(health_only_->port(), ""),
            HealthCheckResponse::NOT_SERVING);
}

TEST(HealthOnlyServerTest, RejectsBadAddressesNamingTheFlag) {
  auto status = std::make_shared<HealthStatus>();
  auto bad = HealthOnlyServer::Start("no-port", status);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("--health_listen"));
  ASSERT_OK_AND_ASSIGN(auto first, HealthOnlyServer::Start("127.0.0.1:0", status));
  auto taken = HealthOnlyServer::Start(
      absl::StrCat("127.0.0.1:", first->port()), status);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(taken.status().message()), HasSubstr("--health_listen"));
}

}  // namespace
}  // namespace pshard
