// The fixture of the services' in-process gRPC tests (job_service_test.cc,
// worker_control_service_test.cc, cluster_service_test.cc): a real
// Coordinator on the real clock behind the real CoordinatorServer, reached
// through its in-process channel, with one stub per service and the request
// builders the tests share; its store is behind a FaultStateStore (faults_)
// that tests may arm. Waits use short deadlines rather than sleeps.
#ifndef PSHARD_SERVER_SERVICES_TEST_FIXTURE_H_
#define PSHARD_SERVER_SERVICES_TEST_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "common/clock.h"
#include "common/proto_time.h"
#include "common/status_matchers.h"
#include "coordinator/coordinator.h"
#include "coordinator/fault_state_store.h"
#include "coordinator/state_store.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pshard/v1/cluster.grpc.pb.h"
#include "pshard/v1/job.grpc.pb.h"
#include "pshard/v1/shard.grpc.pb.h"
#include "pshard/v1/worker_control.grpc.pb.h"
#include "server/coordinator_server.h"

namespace pshard {
namespace server {

inline v1::JobSpec Spec(int world_size) {
  v1::JobSpec spec;
  spec.set_name("grpc-test");
  spec.set_world_size(world_size);
  spec.mutable_synthetic()->set_num_parameters(1000);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_lr(0.1);
  spec.set_steps(5);
  return spec;
}

inline google::protobuf::Duration Millis(int64_t ms) {
  return ToProto(absl::Milliseconds(ms));
}

inline v1::KvGetRequest MakeKvGet(const v1::Job& job, const std::string& key,
                           int64_t timeout_ms) {
  v1::KvGetRequest req;
  req.set_job_id(job.id());
  req.set_epoch(job.epoch());
  req.set_key(key);
  *req.mutable_timeout() = Millis(timeout_ms);
  return req;
}

inline v1::KvPutRequest MakeKvPut(const v1::Job& job, const std::string& key,
                           const std::string& value) {
  v1::KvPutRequest req;
  req.set_job_id(job.id());
  req.set_epoch(job.epoch());
  req.set_key(key);
  req.set_value(value);
  return req;
}

class ServicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto inner = coordinator::StateStore::Open(":memory:");
    ASSERT_OK(inner);
    auto store =
        std::make_unique<coordinator::FaultStateStore>(*std::move(inner));
    faults_ = store.get();
    coordinator::CoordinatorOptions options;
    options.worker_timeout = absl::Seconds(60);  // no loss during a test
    auto c = coordinator::Coordinator::Create(options, &clock_, std::move(store));
    ASSERT_OK(c);
    coordinator_ = *std::move(c);
    ServerOptions server_options;
    server_options.listen = "127.0.0.1:0";
    server_options.security.insecure = true;
    // The plaintext health-only server too (tests check it says the same).
    server_options.health_listen = "127.0.0.1:0";
    server_options.tick_interval = absl::Milliseconds(10);
    server_options.services.max_watchers = 4;
    server_options.services.watch_poll = absl::Milliseconds(100);
    auto s = CoordinatorServer::Start(coordinator_.get(), &clock_, server_options);
    ASSERT_OK(s);
    server_ = *std::move(s);
    channel_ = server_->InProcessChannel();
    jobs_ = v1::JobService::NewStub(channel_);
    shards_ = v1::ShardService::NewStub(channel_);
    cluster_ = v1::ClusterService::NewStub(channel_);
    control_ = v1::WorkerControl::NewStub(channel_);
  }

  void TearDown() override {
    if (server_) server_->Shutdown(absl::Milliseconds(200));
    server_.reset();
    coordinator_.reset();
  }

  std::string Register(const std::string& name) {
    grpc::ClientContext ctx;
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_incarnation("inc");
    req.set_host("h");
    v1::RegisterWorkerResponse resp;
    EXPECT_TRUE(control_->RegisterWorker(&ctx, req, &resp).ok());
    return resp.worker_id();
  }

  v1::Job Submit(int world_size) {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec(world_size);
    v1::Job job;
    grpc::Status s = jobs_->SubmitJob(&ctx, req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  v1::Job Get(const std::string& id) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    EXPECT_TRUE(jobs_->GetJob(&ctx, req, &job).ok());
    return job;
  }

  // CancelJob(job_id, reason); `out` may be null.
  grpc::Status Cancel(const std::string& job_id, const std::string& reason = "",
                      v1::Job* out = nullptr) {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_job_id(job_id);
    req.set_reason(reason);
    v1::Job job;
    return jobs_->CancelJob(&ctx, req, out != nullptr ? out : &job);
  }

  grpc::Status GetShards(const std::string& job_id, v1::ShardAssignment* out) {
    grpc::ClientContext ctx;
    v1::GetShardAssignmentRequest req;
    req.set_job_id(job_id);
    return shards_->GetShardAssignment(&ctx, req, out);
  }

  v1::ReportBucketsRequest Layout(const v1::Job& job, int rank, int64_t n) {
    v1::ReportBucketsRequest req;
    req.set_job_id(job.id());
    req.set_epoch(job.epoch());
    req.set_rank(rank);
    req.set_worker_id(job.members(rank).worker_id());
    auto* b = req.add_buckets();
    b->set_index(0);
    auto* p = b->add_parameters();
    p->set_name("w");
    p->set_num_elements(n);
    p->set_dtype("F32");
    return req;
  }

  RealClock clock_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  // Owned by coordinator_.
  coordinator::FaultStateStore* faults_ = nullptr;
  std::unique_ptr<CoordinatorServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::ShardService::Stub> shards_;
  std::unique_ptr<v1::ClusterService::Stub> cluster_;
  std::unique_ptr<v1::WorkerControl::Stub> control_;
};

}  // namespace server
}  // namespace pshard

#endif  // PSHARD_SERVER_SERVICES_TEST_FIXTURE_H_
