// Links every generated service and message of the v1 API into one binary and
// checks that stubs reach services through a real (in-process) gRPC server.
#include <memory>

#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pshard/v1/cluster.grpc.pb.h"
#include "pshard/v1/job.grpc.pb.h"
#include "pshard/v1/shard.grpc.pb.h"
#include "pshard/v1/worker_control.grpc.pb.h"
#include "pshard/v1/worker_status.grpc.pb.h"

namespace pshard::v1 {
namespace {

// Answers GetJob with a fixed job; every other method keeps the generated
// UNIMPLEMENTED default.
class FixedJobService final : public JobService::Service {
  grpc::Status GetJob(grpc::ServerContext*, const GetJobRequest* request,
                      Job* job) override {
    job->set_id(request->job_id());
    job->set_state(RUNNING);
    return grpc::Status::OK;
  }
};

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.RegisterService(&jobs_);
    builder.RegisterService(&shards_);
    builder.RegisterService(&cluster_);
    builder.RegisterService(&control_);
    builder.RegisterService(&status_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = server_->InProcessChannel(grpc::ChannelArguments());
  }
  void TearDown() override { server_->Shutdown(); }

  FixedJobService jobs_;
  ShardService::Service shards_;
  ClusterService::Service cluster_;
  WorkerControl::Service control_;
  WorkerStatus::Service status_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(ApiTest, EveryServiceIsReachable) {
  {
    grpc::ClientContext context;
    GetJobRequest request;
    request.set_job_id("job-1");
    Job job;
    ASSERT_TRUE(JobService::NewStub(channel_)->GetJob(&context, request, &job).ok());
    EXPECT_EQ(job.id(), "job-1");
    EXPECT_EQ(job.state(), RUNNING);
  }
  auto expect_unimplemented = [](const grpc::Status& status) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED)
        << status.error_message();
  };
  {
    grpc::ClientContext context;
    ShardAssignment response;
    expect_unimplemented(ShardService::NewStub(channel_)->GetShardAssignment(
        &context, GetShardAssignmentRequest(), &response));
  }
  {
    grpc::ClientContext context;
    ListWorkersResponse response;
    expect_unimplemented(ClusterService::NewStub(channel_)->ListWorkers(
        &context, ListWorkersRequest(), &response));
  }
  {
    grpc::ClientContext context;
    HeartbeatResponse response;
    expect_unimplemented(WorkerControl::NewStub(channel_)->Heartbeat(
        &context, HeartbeatRequest(), &response));
  }
  {
    grpc::ClientContext context;
    GetWorkerStatusResponse response;
    expect_unimplemented(WorkerStatus::NewStub(channel_)->GetStatus(
        &context, GetWorkerStatusRequest(), &response));
  }
}

TEST(JobSpecJsonTest, RoundTripsThroughProtobufJsonMapping) {
  JobSpec spec;
  spec.set_name("demo");
  spec.set_world_size(2);
  spec.set_comm_mode(JobSpec::REDUCE_BROADCAST);
  spec.mutable_synthetic()->set_num_parameters(1024);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAMW);
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_lr(0.5);
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(spec, &json).ok());
  EXPECT_NE(json.find("\"REDUCE_BROADCAST\""), std::string::npos) << json;
  JobSpec parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok());
  EXPECT_EQ(parsed.SerializeAsString(), spec.SerializeAsString());
}

}  // namespace
}  // namespace pshard::v1
