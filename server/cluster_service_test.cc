// ClusterService over in-process gRPC: paged ListWorkers/ListJobs, drain and
// undrain, and the standard health service.
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "server/services_test_fixture.h"

namespace pshard {
namespace server {
namespace {

using ::testing::HasSubstr;

TEST_F(ServicesTest, ListWorkersAndListJobsPage) {
  for (int i = 0; i < 5; ++i) Register(absl::StrCat("pod-", i));
  std::vector<std::string> ids;
  std::string token;
  int pages = 0;
  do {
    grpc::ClientContext ctx;
    v1::ListWorkersRequest req;
    req.set_page_size(2);
    req.set_page_token(token);
    v1::ListWorkersResponse resp;
    ASSERT_TRUE(cluster_->ListWorkers(&ctx, req, &resp).ok());
    for (const auto& w : resp.workers()) ids.push_back(w.id());
    token = resp.next_page_token();
  } while (!token.empty() && ++pages < 10);
  EXPECT_THAT(ids, ::testing::ElementsAre("w-1", "w-2", "w-3", "w-4", "w-5"));
  for (int i = 0; i < 3; ++i) Submit(9);  // stay QUEUED
  {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.set_page_size(2);
    v1::ListJobsResponse first;
    ASSERT_TRUE(jobs_->ListJobs(&ctx, req, &first).ok());
    ASSERT_EQ(first.jobs_size(), 2);
    EXPECT_EQ(first.jobs(0).id(), "job-3");
    grpc::ClientContext ctx2;
    req.set_page_token(first.next_page_token());
    v1::ListJobsResponse second;
    ASSERT_TRUE(jobs_->ListJobs(&ctx2, req, &second).ok());
    ASSERT_EQ(second.jobs_size(), 1);
    EXPECT_EQ(second.jobs(0).id(), "job-1");
    EXPECT_EQ(second.next_page_token(), "");
    // `limit` still sizes the page for clients written before paging.
    grpc::ClientContext ctx3;
    v1::ListJobsRequest old;
    old.set_limit(1);
    v1::ListJobsResponse one;
    ASSERT_TRUE(jobs_->ListJobs(&ctx3, old, &one).ok());
    EXPECT_EQ(one.jobs_size(), 1);
    EXPECT_NE(one.next_page_token(), "");
  }
  // Bad sizes and tokens.
  auto workers_status = [&](int size, const std::string& token) {
    grpc::ClientContext ctx;
    v1::ListWorkersRequest req;
    req.set_page_size(size);
    req.set_page_token(token);
    v1::ListWorkersResponse resp;
    return cluster_->ListWorkers(&ctx, req, &resp);
  };
  grpc::Status s = workers_status(-1, "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("page_size"));
  s = workers_status(0, "not-a-token");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("page_token"));
  {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.set_page_size(-2);
    v1::ListJobsResponse resp;
    EXPECT_EQ(jobs_->ListJobs(&ctx, req, &resp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
}

TEST_F(ServicesTest, DrainAndUndrainWorker) {
  const std::string a = Register("pod-a");
  {
    grpc::ClientContext ctx;
    v1::DrainWorkerRequest req;
    req.set_worker("pod-a");
    v1::WorkerInfo info;
    ASSERT_TRUE(cluster_->DrainWorker(&ctx, req, &info).ok());
    EXPECT_EQ(info.id(), a);
    EXPECT_EQ(info.state(), v1::DRAINING);
    EXPECT_TRUE(info.drain_requested());
  }
  {
    // Visible in ListWorkers.
    grpc::ClientContext ctx;
    v1::ListWorkersResponse resp;
    ASSERT_TRUE(cluster_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok());
    ASSERT_EQ(resp.workers_size(), 1);
    EXPECT_EQ(resp.workers(0).state(), v1::DRAINING);
  }
  v1::Job job = Submit(1);
  EXPECT_EQ(Get(job.id()).state(), v1::QUEUED);
  {
    grpc::ClientContext ctx;
    v1::UndrainWorkerRequest req;
    req.set_worker(a);
    v1::WorkerInfo info;
    ASSERT_TRUE(cluster_->UndrainWorker(&ctx, req, &info).ok());
    EXPECT_FALSE(info.drain_requested());
    EXPECT_EQ(info.state(), v1::BUSY);
  }
  EXPECT_EQ(Get(job.id()).state(), v1::STARTING);
  {
    grpc::ClientContext ctx;
    v1::GetWorkerRequest req;
    req.set_worker(a);
    v1::WorkerInfo info;
    ASSERT_TRUE(cluster_->GetWorker(&ctx, req, &info).ok());
    EXPECT_EQ(info.job_id(), job.id());
  }
  {
    grpc::ClientContext ctx;
    v1::DrainWorkerRequest req;
    req.set_worker("pod-nope");
    v1::WorkerInfo info;
    grpc::Status s = cluster_->DrainWorker(&ctx, req, &info);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(s.error_message(), HasSubstr("no worker \"pod-nope\""));
  }
}

// The status of the server ("") or of one service by name; UNKNOWN when the
// check itself fails (NOT_FOUND for a name it does not know).
grpc::health::v1::HealthCheckResponse::ServingStatus CheckHealth(
    grpc::health::v1::Health::Stub* stub, const std::string& service,
    grpc::StatusCode* code = nullptr) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&ctx, request, &response);
  if (code != nullptr) *code = status.error_code();
  return status.ok() ? response.status()
                     : grpc::health::v1::HealthCheckResponse::UNKNOWN;
}

TEST_F(ServicesTest, HealthServiceAnswersForTheServerAndEachService) {
  using grpc::health::v1::HealthCheckResponse;
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  for (const std::string service :
       {"", "pshard.v1.JobService", "pshard.v1.ShardService",
        "pshard.v1.ClusterService", "pshard.v1.WorkerControl"}) {
    EXPECT_EQ(CheckHealth(stub.get(), service), HealthCheckResponse::SERVING)
        << "service \"" << service << "\"";
  }
  grpc::StatusCode code = grpc::StatusCode::OK;
  CheckHealth(stub.get(), "pshard.v1.NoSuchService", &code);
  EXPECT_EQ(code, grpc::StatusCode::NOT_FOUND);
}

// Health follows the state store: NOT_SERVING while it cannot commit (a
// refused change says why), SERVING again by itself once it can (the
// ticker's probe, with no client change needed).
TEST_F(ServicesTest, HealthIsNotServingWhileTheStateStoreCannotCommit) {
  using grpc::health::v1::HealthCheckResponse;
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext watch;
  watch.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> updates =
      stub->Watch(&watch, grpc::health::v1::HealthCheckRequest());
  HealthCheckResponse status;
  ASSERT_TRUE(updates->Read(&status));
  EXPECT_EQ(status.status(), HealthCheckResponse::SERVING);

  faults_->FailCommits(-1, absl::InternalError("database or disk is full"));
  grpc::ClientContext ctx;
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec(1);
  v1::Job job;
  const grpc::Status refused = jobs_->SubmitJob(&ctx, req, &job);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(), HasSubstr("database or disk is full"));
  ASSERT_TRUE(updates->Read(&status));  // the next change of status
  EXPECT_EQ(status.status(), HealthCheckResponse::NOT_SERVING);
  // The health-only port (--health_listen, what the kubelet probes) says
  // the same: it answers from the same statuses.
  ASSERT_NE(server_->health_port(), 0);
  auto health_port = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server_->health_port()),
      grpc::InsecureChannelCredentials()));
  EXPECT_EQ(CheckHealth(health_port.get(), ""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(CheckHealth(health_port.get(), "pshard.v1.JobService"),
            HealthCheckResponse::NOT_SERVING);
  // The services that write follow the store; the read-only one does not.
  EXPECT_EQ(CheckHealth(stub.get(), "pshard.v1.JobService"),
            HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(CheckHealth(stub.get(), "pshard.v1.WorkerControl"),
            HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(CheckHealth(stub.get(), "pshard.v1.ShardService"),
            HealthCheckResponse::SERVING);

  faults_->Heal();
  ASSERT_TRUE(updates->Read(&status));
  EXPECT_EQ(status.status(), HealthCheckResponse::SERVING);
  EXPECT_EQ(CheckHealth(health_port.get(), ""), HealthCheckResponse::SERVING);
  EXPECT_EQ(CheckHealth(stub.get(), "pshard.v1.JobService"),
            HealthCheckResponse::SERVING);
  EXPECT_EQ(Submit(1).id(), "job-2");  // job-1 was refused: not reused
  watch.TryCancel();
}

}  // namespace
}  // namespace server
}  // namespace pshard
